"""Benchmark: `kprobe-tui lines/vars` against `perf probe -L/-V`, cold and warm, on real debug info.

For 20 functions of libpython3.11 and 20 of Debian's vmlinux, in the same run as perf on the
same function (each figure the median of --repeat runs):
  cold    = a fresh process, empty index cache (the per-build-id index is built, the unit walked),
  warm    = a fresh process asking the same again with the cache filled (as a user at a shell):
            the index holds the answer, so no DWARF is parsed and pyelftools is not imported,
  in-proc = the second query on an already open DebugInfo, no process start (as the TUI and any
            long-running caller ask): our own work, without the interpreter's start-up.
Also prints the floors every fresh process pays before doing anything: `python -S -c pass`,
`python -c pass` (site: .pth files of the install) and `python -I -c 'import kprobe_tui.cli'`.
Prints seconds, ratios to perf, peak RSS, and whether the output equals perf's.
Targets (issue 3): cold <= 1.5x perf, warm <= 0.3x perf, RSS <= 500 MB on the vmlinux.

    python benchmarks/bench_debuginfo.py [--only libpython|vmlinux] [--functions N] [--repeat N]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "debuginfo"))

from kernel_debug import ensure_kernel_debug, skip_reason  # noqa: E402  (found through the sys.path above)

LIBPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0")
LIBPYTHON_FUNCTIONS = [
    "PyObject_GetAttr", "PyDict_GetItem", "PyList_Append", "PyLong_FromLong", "PyUnicode_FromString",
    "PyObject_Repr", "PyTuple_New", "PyNumber_Add", "PyObject_Hash", "PyDict_SetItem", "PyObject_Str",
    "PyObject_GetItem", "PyObject_SetAttr", "PyList_New", "PyDict_New", "PyUnicode_Concat",
    "PyObject_RichCompare", "PyLong_AsLong", "PyFloat_FromDouble", "PyTuple_GetItem",
]
KERNEL_FUNCTIONS = [
    "tcp_recvmsg", "do_sys_openat2", "vfs_read", "vfs_write", "tcp_sendmsg", "ip_rcv", "do_filp_open",
    "try_to_wake_up", "tcp_v4_rcv", "udp_recvmsg", "inet_sendmsg", "sock_recvmsg", "do_exit",
    "wake_up_new_task", "filp_close", "ksys_read", "__alloc_pages", "kfree", "vfs_open", "tcp_close",
]


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str, int]:
    """Wall seconds, peak RSS in KB, stdout and exit status of one process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return elapsed, usage.ru_maxrss, out.read().decode(errors="replace"), proc.returncode


def floors(repeat: int) -> None:
    """What every fresh process pays before our code runs, measured now beside the rest."""
    python = sys.executable
    for label, argv in (("python -S -c pass (bare interpreter)", [python, "-S", "-c", "pass"]),
                        ("python -c pass (+ site, .pth files)", [python, "-c", "pass"]),
                        ("python -I -c 'import kprobe_tui.cli'", [python, "-I", "-c", "import kprobe_tui.cli"])):
        print(f"floor: {label:<40}{statistics.median(run(argv)[0] for _ in range(max(repeat, 5))):.3f}s")


def in_process(target: list[str], source: list[str], mode: str, function: str, repeat: int) -> float:
    """Seconds of the second and later queries on one open DebugInfo (what the TUI pays per question)."""
    from kprobe_tui.debuginfo.describe import format_points
    from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
    from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo

    binary, vmlinux = (target[1], None) if target[0] == "-x" else (None, target[1])
    info = open_debuginfo(binary=binary, vmlinux=vmlinux, source_dir=source[1] if source else None)

    def query() -> None:
        if mode == "vars":
            spec = PointSpec.parse(function)
            format_points(spec, info.probe_points(spec), False)
        else:
            render(info, find_line_range(info, LineSpec.parse(function)))

    query()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        query()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_target(label: str, target: list[str], source: list[str], functions: list[str], repeat: int) -> dict:
    ours = [sys.executable, "-m", "kprobe_tui"]
    rows = []
    print(f"\n== {label}")
    print(f"{'function':<22}{'mode':<6}{'perf s':>8}{'cold s':>8}{'x':>6}{'warm s':>8}{'x':>6}"
          f"{'inproc ms':>10}{'x':>7}{'RSS MB':>8}  same")
    for function in functions:
        for mode, perf_flag, command, extra in (("vars", "-V", "vars", []), ("lines", "-L", "lines", source)):
            perf_runs = [run(["perf", "probe", *target, *extra, perf_flag, function]) for _ in range(repeat)]
            perf_s, perf_out, perf_rc = statistics.median(r[0] for r in perf_runs), perf_runs[0][2], perf_runs[0][3]
            colds, warms = [], []
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as cache:
                    env = {**os.environ, "XDG_CACHE_HOME": cache}
                    colds.append(run([*ours, command, *target, *extra, function], env))
                    warms.append(run([*ours, command, *target, *extra, function], env))
            with tempfile.TemporaryDirectory() as cache:
                os.environ["XDG_CACHE_HOME"] = cache
                inproc_s = in_process(target, extra, mode, function, repeat)
                del os.environ["XDG_CACHE_HOME"]
            cold_s, warm_s = statistics.median(r[0] for r in colds), statistics.median(r[0] for r in warms)
            rss = max(r[1] for r in colds + warms)
            outputs = {r[2] for r in colds + warms}
            ok = all(r[3] == 0 for r in colds + warms) and outputs == {perf_out}
            same = "yes" if perf_rc == 0 and ok else ("perf failed" if perf_rc else "NO")
            rows.append((function, mode, perf_s, cold_s, warm_s, inproc_s, rss, same))
            print(f"{function:<22}{mode:<6}{perf_s:8.3f}{cold_s:8.3f}{cold_s / perf_s:6.2f}{warm_s:8.3f}"
                  f"{warm_s / perf_s:6.2f}{inproc_s * 1000:10.2f}{inproc_s / perf_s:7.3f}{rss / 1024:8.0f}  {same}")
    summary = {}
    for mode in ("vars", "lines"):
        picked = [r for r in rows if r[1] == mode]
        perf_total = sum(r[2] for r in picked)
        summary[mode] = s = (
            statistics.median(r[2] for r in picked),
            statistics.median(r[3] for r in picked), sum(r[3] for r in picked) / perf_total,
            statistics.median(r[4] for r in picked), sum(r[4] for r in picked) / perf_total,
            statistics.median(r[5] for r in picked), sum(r[5] for r in picked) / perf_total,
            max(r[6] for r in picked) / 1024,
            sum(r[7] == "yes" for r in picked), sum(r[7] == "NO" for r in picked), len(picked),
        )
        print(f"{label} {mode}: median perf {s[0]:.3f}s | cold median {s[1]:.3f}s, total {s[2]:.2f}x perf | "
              f"warm median {s[3]:.3f}s, total {s[4]:.2f}x perf | in-process warm median {s[5] * 1000:.2f}ms, "
              f"total {s[6]:.3f}x perf | peak RSS {s[7]:.0f} MB | identical {s[8]}/{s[10]}, different {s[9]}")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["libpython", "vmlinux"])
    parser.add_argument("--functions", type=int, default=20, help="how many functions per target")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is shown)")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed: nothing to compare with", file=sys.stderr)
        return 1
    # Measure the package as installed (pip writes .pyc files): with PYTHONDONTWRITEBYTECODE set,
    # a tree whose sources changed would be compiled again by every process we time.
    compileall.compile_dir(ROOT / "kprobe_tui", quiet=1)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} CPUs; each figure the median of {args.repeat} runs")
    floors(args.repeat)
    if args.only in (None, "libpython") and LIBPYTHON.exists():
        bench_target("libpython3.11 (DWARF5, -O3)", ["-x", str(LIBPYTHON)], [], LIBPYTHON_FUNCTIONS[: args.functions],
                     args.repeat)
    if args.only in (None, "vmlinux"):
        reason = skip_reason()
        if reason:
            print(f"vmlinux skipped: {reason}")
        else:
            kernel = ensure_kernel_debug()
            bench_target(f"vmlinux {kernel.release} (633 MB, DWARF5)", ["-k", str(kernel.vmlinux)],
                         ["-s", str(kernel.source)], KERNEL_FUNCTIONS[: args.functions], args.repeat)
    print("\ntargets: cold <= 1.5x perf, warm <= 0.3x perf, RSS <= 500 MB on the vmlinux")
    return 0


if __name__ == "__main__":
    sys.exit(main())
