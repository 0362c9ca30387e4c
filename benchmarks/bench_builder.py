"""Probe builder speed on a real optimised binary, with perf timed on the same work in the same run.

Prints: BinaryCatalog build + warm on the binary beside ``perf probe -x BIN --funcs``, and one
preview (parse, guard, compile from DWARF) beside ``perf probe -x BIN --dry-run`` for the same
probe; the first preview opens the DWARF, the later ones are what a keystroke costs.
Usage: python benchmarks/bench_builder.py [BINARY FUNCTION ARGS...]
(default: pyenv's libpython3.11 and ``PyList_Append op newitem``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.form import BuildRequest, build_preview
from kprobe_tui.probes.pipeline import ProbeTarget

DEFAULT = ["/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", "PyList_Append", "op", "newitem"]
RUNS = 5


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def perf(*argv: str) -> float:
    return timed(lambda: subprocess.run(["perf", "probe", *argv], check=True, capture_output=True))


def main() -> None:
    binary, function, *args = sys.argv[1:] or DEFAULT
    catalog_s = statistics.median(timed(lambda: BinaryCatalog(binary).warm()) for _ in range(RUNS))
    perf_funcs_s = statistics.median(perf("-x", binary, "--funcs", "--no-demangle") for _ in range(RUNS))
    names = len(BinaryCatalog(binary).names)
    print(f"function list of {binary} ({names} names), median of {RUNS}:")
    print(f"  BinaryCatalog build + warm   {ms(catalog_s)}")
    print(f"  perf probe -x BIN --funcs    {ms(perf_funcs_s)}   ratio {catalog_s / perf_funcs_s:5.2f}x")

    request = BuildRequest(function, binary, "entry", args=" ".join(args))
    first = timed(lambda: build_preview(request, ProbeTarget()))
    preview = build_preview(request, ProbeTarget())
    if preview.error is not None:
        raise SystemExit(f"the preview failed: {preview.error}")
    again = statistics.median(timed(lambda: build_preview(request, ProbeTarget())) for _ in range(RUNS * 4))
    perf_dry = statistics.median(perf("-x", binary, "--dry-run", "-a", " ".join([function, *args])) for _ in range(RUNS))
    print(f"preview of {function} {' '.join(args)}:")
    print(f"  first (opens the DWARF)      {ms(first)}")
    print(f"  each keystroke after         {ms(again)}")
    print(f"  perf probe --dry-run         {ms(perf_dry)}   ratio {again / perf_dry:5.2f}x (keystroke / perf)")
    print(f"  tracefs: {preview.probes[0].definition()}")


if __name__ == "__main__":
    main()
