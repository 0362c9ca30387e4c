"""How fast probe definitions compile from DWARF, beside `perf probe -D` on the same specs in the same run.

    python benchmarks/bench_probe_compile.py [--binary LIB] [--repeat 3]

For each spec on a large optimised binary (libpython, full DWARF 5) prints: perf probe -D wall
time, `kprobe-tui probe --dry-run` wall time (a fresh process, like perf), the in-process compile
time with the debug info already open, and whether the definitions agree (where they differ, the
reason is printed: perf keeps only the first op of a location and captures the wrong value).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from kprobe_tui.debuginfo.scope import open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec

LIBPYTHON = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
SPECS = [
    "PyList_Append op->ob_refcnt newitem->ob_type->tp_name:string",
    "PyObject_GetAttr v->ob_type->tp_name:string name",
    "PyUnicode_FromString u:string",
    "PyLong_FromLong:10 $vars",
    "list_resize:11 $vars",
    "PyList_Insert:3 $vars",
]


def wall(argv: list[str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def perf_lines(binary: str, spec: str) -> list[str]:
    out = subprocess.run(["perf", "probe", "-x", binary, "-D", spec], capture_output=True, text=True).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line[:2] in ("p:", "r:")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=LIBPYTHON)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    open_debuginfo(binary=args.binary)  # warm the name index cache, as perf's buildid cache is warm
    print(f"{'spec':58} {'perf -D':>9} {'ours CLI':>9} {'ratio':>6} {'ours warm':>10}  agree")
    for spec in SPECS:
        perf_s = wall(["perf", "probe", "-x", args.binary, "-D", spec], args.repeat)
        ours_s = wall([sys.executable, "-m", "kprobe_tui", "probe", "-n", "-x", args.binary, *spec.split()], args.repeat)
        start = time.perf_counter()
        try:
            ours = [p.definition().split(" ", 1)[1] for p in compile_spec(parse_spec(spec.split(), binary=args.binary), "g")]
        except UserError as exc:
            ours = [f"refused: {exc.message}"]
        warm = time.perf_counter() - start
        theirs = perf_lines(args.binary, spec)
        agree = "yes" if ours == theirs else ("perf refuses" if not theirs else "no")
        print(f"{spec[:58]:58} {perf_s * 1000:7.0f}ms {ours_s * 1000:7.0f}ms {ours_s / perf_s:5.1f}x {warm * 1000:8.0f}ms  {agree}")
        if agree == "no":
            for line in sorted(set(theirs) ^ set(ours)):
                print(f"    {'perf' if line in theirs else 'ours'}: {line.replace(args.binary, 'BIN')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
