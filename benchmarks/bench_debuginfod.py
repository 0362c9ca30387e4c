"""Benchmark: debuginfod downloads and the first answer from a cold cache, beside elfutils and perf.

A real `debuginfod` on loopback serves the debug file of a stripped copy of libpython3.11 (the pyenv
build, DWARF5) and, when cached, Debian's 633 MB debug vmlinux. In the same run, each figure the
median of --repeat runs, every run with fresh caches unless it says warm:
  download  ours (debuginfod.Client in this process) and elfutils' `debuginfod-find` (libcurl):
            seconds and MB/s for the same file from the same server;
  vars/lines  `kprobe-tui vars|lines -x STRIPPED FUNC` as a fresh process: cold = empty debuginfod
            cache and empty index (download, index, answer), warm = both filled; beside it `perf probe
            -V` on the same stripped file, which libdw's debuginfod support fetches into the same kind
            of cache (perf 6.1 cannot fetch sources, so -L has no perf figure: no source on disk).

    python benchmarks/bench_debuginfod.py [--repeat N] [--no-vmlinux]
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
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "debuginfo")]

from debuginfod_servers import Debuginfod  # noqa: E402
from kernel_debug import CACHE_DIR  # noqa: E402

from kprobe_tui.debuginfo.debuginfod import Client, Settings  # noqa: E402
from kprobe_tui.debuginfo.locate import ElfSections  # noqa: E402

LIBPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0")
FUNCTION = "PyList_Append"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, result


def fresh_env(work: Path, url: str) -> dict[str, str]:
    """A fresh debuginfod cache and index cache under ``work``."""
    cache = Path(tempfile.mkdtemp(dir=work))
    env = dict(os.environ, DEBUGINFOD_URLS=url, DEBUGINFOD_CACHE_PATH=str(cache / "debuginfod"),
               XDG_CACHE_HOME=str(cache / "xdg"))
    env.pop("DEBUGINFOD_PROGRESS", None)
    return env


def download(work: Path, url: str, build_id: str, size: int, repeat: int) -> str:
    ours, theirs = [], []
    for _ in range(repeat):
        env = fresh_env(work, url)
        settings = Settings((url,), Path(env["DEBUGINFOD_CACHE_PATH"]))
        start = time.perf_counter()
        Client(settings).debuginfo(build_id)
        ours.append(time.perf_counter() - start)
        seconds, result = timed(["debuginfod-find", "debuginfo", build_id], fresh_env(work, url))
        assert result.returncode == 0, result.stderr
        theirs.append(seconds)
    mine, elfutils = statistics.median(ours), statistics.median(theirs)
    return (f"download {size / 1e6:.1f} MB: ours {mine:.2f} s ({size / 1e6 / mine:.0f} MB/s) | "
            f"debuginfod-find {elfutils:.2f} s ({size / 1e6 / elfutils:.0f} MB/s) | {mine / elfutils:.2f}x")


def first_answer(work: Path, url: str, stripped: Path, repeat: int) -> list[str]:
    ours = [sys.executable, "-m", "kprobe_tui"]
    rows = []
    for command, perf_flag in (("vars", "-V"), ("lines", None)):
        cold, warm, perf_cold, perf_warm = [], [], [], []
        for _ in range(repeat):
            env = fresh_env(work, url)
            seconds, result = timed([*ours, command, "-x", str(stripped), FUNCTION], env)
            assert result.returncode == 0, result.stderr
            cold.append(seconds)
            warm.append(timed([*ours, command, "-x", str(stripped), FUNCTION], env)[0])
            if perf_flag:  # its own build-id cache (~/.debug) may hold the unstripped file: a fresh one
                env = fresh_env(work, url)
                perf = ["perf", "--buildid-dir", tempfile.mkdtemp(dir=work), "probe", "-x", str(stripped), perf_flag, FUNCTION]
                seconds, result = timed(perf, env)
                assert result.returncode == 0, result.stderr
                assert Path(env["DEBUGINFOD_CACHE_PATH"]).exists(), "perf did not fetch from debuginfod"
                perf_cold.append(seconds)
                perf_warm.append(timed(perf, env)[0])
        row = f"{command} {FUNCTION}: ours cold {statistics.median(cold):.2f} s, warm {statistics.median(warm):.2f} s"
        if perf_flag:
            row += (f" | perf {perf_flag} cold {statistics.median(perf_cold):.2f} s, warm {statistics.median(perf_warm):.2f} s"
                    f" | cold {statistics.median(cold) / statistics.median(perf_cold):.2f}x,"
                    f" warm {statistics.median(warm) / statistics.median(perf_warm):.2f}x")
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-vmlinux", action="store_true")
    args = parser.parse_args()
    for tool in ("debuginfod", "debuginfod-find", "perf", "objcopy"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed")
            return 2
    vmlinux = sorted(CACHE_DIR.glob("vmlinux-6.1.0-*-amd64"))
    with tempfile.TemporaryDirectory(prefix="bench-debuginfod-") as tmp:
        work = Path(tmp)
        shelf = work / "served"
        shelf.mkdir()
        stripped = work / "libpython3.11.so.1.0"
        subprocess.run(["objcopy", "--only-keep-debug", str(LIBPYTHON), str(shelf / "libpython.debug")], check=True)
        subprocess.run(["objcopy", "--strip-debug", str(LIBPYTHON), str(stripped)], check=True)
        served = [(ElfSections(LIBPYTHON).build_id(), (shelf / "libpython.debug").stat().st_size)]
        if vmlinux and not args.no_vmlinux:
            os.link(vmlinux[-1], shelf / "vmlinux") if os.stat(vmlinux[-1]).st_dev == os.stat(shelf).st_dev \
                else shutil.copy(vmlinux[-1], shelf / "vmlinux")
            served.append((ElfSections(vmlinux[-1]).build_id(), vmlinux[-1].stat().st_size))
        started = time.perf_counter()
        with Debuginfod(shelf, work, "--disable-source-scan").start([b for b, _ in served], timeout=600) as server:
            print(f"debuginfod indexed {len(served)} files in {time.perf_counter() - started:.1f} s")
            for build_id, size in served:
                print(download(work, server.url, build_id, size, args.repeat))
            for row in first_answer(work, server.url, stripped, args.repeat):
                print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
