"""Benchmark: `kprobe-tui lines/vars` against `perf probe -L/-V`, cold and warm, on real debug info.

For 20 functions of libpython3.11 and 20 of Debian's vmlinux, each run as a fresh process (as a
user would), in the same run as perf on the same function:
  cold = empty index cache (the per-build-id index is built, the unit walked),
  warm = the same query again with the cache filled.
Prints seconds, ratios to perf, peak RSS, and whether the output equals perf's.
Targets (issue 3): cold <= 1.5x perf, warm <= 0.3x perf, RSS <= 500 MB on the vmlinux.

    python benchmarks/bench_debuginfo.py [--only libpython|vmlinux] [--functions N]
"""

from __future__ import annotations

import argparse
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

from kernel_debug import ensure_kernel_debug, skip_reason  # noqa: E402  (the tests' cached download)

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


def bench_target(label: str, target: list[str], source: list[str], functions: list[str]) -> dict:
    ours = [sys.executable, "-m", "kprobe_tui"]
    rows = []
    floor = statistics.median(run([*ours, "--version"])[0] for _ in range(5))
    print(f"\n== {label}   (floor: `kprobe-tui --version`, interpreter and imports, takes {floor:.3f}s now)")
    print(f"{'function':<22}{'mode':<6}{'perf s':>8}{'cold s':>8}{'x':>6}{'warm s':>8}{'x':>6}{'RSS MB':>8}  same")
    for function in functions:
        for mode, perf_flag, command, extra in (("vars", "-V", "vars", []), ("lines", "-L", "lines", source)):
            perf_s, _, perf_out, perf_rc = run(["perf", "probe", *target, *extra, perf_flag, function])
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "XDG_CACHE_HOME": cache}
                cold_s, cold_rss, out, rc = run([*ours, command, *target, *extra, function], env)
                warm_s, warm_rss, _, _ = run([*ours, command, *target, *extra, function], env)
            same = "yes" if perf_rc == 0 and rc == 0 and out == perf_out else ("perf failed" if perf_rc else "NO")
            rows.append((function, mode, perf_s, cold_s, warm_s, max(cold_rss, warm_rss), same))
            print(f"{function:<22}{mode:<6}{perf_s:8.3f}{cold_s:8.3f}{cold_s / perf_s:6.2f}"
                  f"{warm_s:8.3f}{warm_s / perf_s:6.2f}{max(cold_rss, warm_rss) / 1024:8.0f}  {same}")
    summary = {}
    for mode in ("vars", "lines"):
        picked = [r for r in rows if r[1] == mode]
        perf_total = sum(r[2] for r in picked)
        summary[mode] = (
            statistics.median(r[2] for r in picked),
            statistics.median(r[3] for r in picked), sum(r[3] for r in picked) / perf_total,
            statistics.median(r[4] for r in picked), sum(r[4] for r in picked) / perf_total,
            max(r[5] for r in picked) / 1024,
            sum(r[6] == "yes" for r in picked), sum(r[6] == "NO" for r in picked), len(picked),
        )
        s = summary[mode]
        print(f"{label} {mode}: median perf {s[0]:.3f}s | cold median {s[1]:.3f}s, total {s[2]:.2f}x perf | "
              f"warm median {s[3]:.3f}s, total {s[4]:.2f}x perf | peak RSS {s[5]:.0f} MB | "
              f"identical {s[6]}/{s[8]}, different {s[7]}")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["libpython", "vmlinux"])
    parser.add_argument("--functions", type=int, default=20, help="how many functions per target")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed: nothing to compare with", file=sys.stderr)
        return 1
    if args.only in (None, "libpython") and LIBPYTHON.exists():
        bench_target("libpython3.11 (DWARF5, -O3)", ["-x", str(LIBPYTHON)], [], LIBPYTHON_FUNCTIONS[: args.functions])
    if args.only in (None, "vmlinux"):
        reason = skip_reason()
        if reason:
            print(f"vmlinux skipped: {reason}")
        else:
            kernel = ensure_kernel_debug()
            bench_target(f"vmlinux {kernel.release} (633 MB, DWARF5)", ["-k", str(kernel.vmlinux)],
                         ["-s", str(kernel.source)], KERNEL_FUNCTIONS[: args.functions])
    print("\ntargets: cold <= 1.5x perf, warm <= 0.3x perf, RSS <= 500 MB on the vmlinux")
    return 0


if __name__ == "__main__":
    sys.exit(main())
