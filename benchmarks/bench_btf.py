"""How fast the BTF reader opens vmlinux BTF and renders prototypes, beside bpftool in the same run.

    python benchmarks/bench_btf.py [--btf /sys/kernel/btf/vmlinux] [--repeat 5]

Prints: open+index time, one cold prototype, all FUNC prototypes, peak RSS; then the reference
`bpftool btf dump file BTF format c > /dev/null` (decodes every type and prints C) when bpftool is installed.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kprobe_tui.kernel.btf import Btf


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def _best(runs: list[float]) -> str:
    return f"{_ms(min(runs))} (median {_ms(statistics.median(runs)).strip()} of {len(runs)})"


def _child_peak_rss_mb(argv: list[str]) -> str:
    """Peak RSS of a command, through /usr/bin/time: a child's own counter starts at its parent's size at fork."""
    if not Path("/usr/bin/time").exists():
        return "n/a (needs /usr/bin/time)"
    with tempfile.NamedTemporaryFile("r") as report:
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *argv],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return f"{int(report.read().split()[-1]) / 1024:8.1f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--btf", type=Path, default=Path("/sys/kernel/btf/vmlinux"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--function", default="vfs_read")
    args = parser.parse_args()

    bpftool = shutil.which("bpftool")
    reference_argv = [str(bpftool), "btf", "dump", "file", str(args.btf), "format", "c"]
    reference: list[float] = []
    for _ in range(args.repeat if bpftool else 0):
        start = time.perf_counter()
        subprocess.run(reference_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        reference.append(time.perf_counter() - start)
    reference_rss = _child_peak_rss_mb(reference_argv) if bpftool else ""

    rss_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    opens, firsts, alls = [], [], []
    for _ in range(args.repeat):
        btf = None  # one reader alive at a time, so the peak RSS is one reader's
        start = time.perf_counter()
        btf = Btf.load(args.btf)
        opened = time.perf_counter()
        btf.prototype(args.function)
        first = time.perf_counter()
        names = list(btf.function_names())
        for name in names:
            btf.prototype(name)
        done = time.perf_counter()
        opens.append(opened - start)
        firsts.append(first - opened)
        alls.append(done - first)
    rss_after_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    print(f"BTF file: {args.btf} ({args.btf.stat().st_size / 1e6:.1f} MB, {len(btf.type_ids())} types, "
          f"{len(names)} functions)")
    print(f"kprobe-tui open+index       {_best(opens)}")
    print(f"kprobe-tui prototype (cold) {_best(firsts)}  {btf.prototype(args.function)}")
    print(f"kprobe-tui all prototypes   {_best(alls)}  ({min(alls) / len(names) * 1e6:.2f} us each)")
    print(f"kprobe-tui peak RSS         {rss_after_kb / 1024:8.1f} MB (interpreter {rss_before_kb / 1024:.1f} MB)")
    if not reference:
        print("reference: bpftool is not installed (apt-get install bpftool); no reference figures")
        return 0
    print(f"bpftool dump format c       {_best(reference)}")
    print(f"bpftool peak RSS            {reference_rss}")
    print(f"ratio to bpftool dump: open+all prototypes {(min(opens) + min(alls)) / min(reference):.2f}, "
          f"open+one prototype {(min(opens) + min(firsts)) / min(reference):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
