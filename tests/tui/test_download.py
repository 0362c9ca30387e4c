"""The source view while debuginfod downloads a stripped program's debug info: a progress bar, the
rest of the app usable, escape cancelling. The server is the test's own on loopback, slowed down so
that the download lasts (debuginfod_servers.ServedFile)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from debuginfod_servers import ServedFile
from textual.widgets import ProgressBar, Static

from kprobe_tui.debuginfo.locate import ElfSections
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.app import KprobeTui
from kprobe_tui.tui.screens.help import HelpScreen
from kprobe_tui.tui.screens.source import SourceScreen
from kprobe_tui.tui.widgets.download_bar import DownloadBar
from kprobe_tui.tui.widgets.function_list import FunctionList
from tests.tui.states import settled, until

C_DIR = Path(__file__).parents[1] / "debuginfo" / "c"


@pytest.fixture
def stripped(tmp_path, monkeypatch) -> tuple[Path, bytes, str]:
    """probed.c stripped to a .gnu_debuglink whose file is only on the server: (binary, debug file, build-id)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    for name in ("XDG_CACHE_HOME", "DEBUGINFOD_CACHE_PATH"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    full, debug, binary = tmp_path / "full", tmp_path / "probed.debug", tmp_path / "probed"
    subprocess.run(["gcc", "-O2", "-g", "-I", str(C_DIR), "-o", str(full), str(C_DIR / "probed.c")], check=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-debug", f"--add-gnu-debuglink={debug}", str(full), str(binary)], check=True,
                   cwd=tmp_path)
    data = debug.read_bytes()
    debug.unlink()
    return binary, data, ElfSections(binary).build_id()


async def open_source(pilot, function: str) -> SourceScreen:
    functions = pilot.app.screen.query_one(FunctionList)
    await until(pilot, lambda: functions.rows, "the function list loads")
    await pilot.press("slash", *function, "enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, SourceScreen), "the source view opens")
    return pilot.app.screen


async def test_the_bar_shows_the_download_while_the_app_stays_usable(stripped, monkeypatch):
    binary, data, build_id = stripped
    with ServedFile(data, build_id, chunk=512, delay=0.25) as server:  # 10 KB in ~5 s
        monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
        app = KprobeTui(locate(), BinaryCatalog(str(binary)))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_source(pilot, "count_ready")
            bar = screen.query_one(DownloadBar)
            await until(pilot, lambda: bar.display and 0 < bar.query_one(ProgressBar).progress, "the bar moves")
            assert bar.query_one(ProgressBar).total == len(data)
            what = str(bar.query_one("#download-what", Static).render())
            numbers = str(bar.query_one("#download-numbers", Static).render())
            assert what == f"Downloading the debug info of build-id {build_id} from {server.url[7:]}"
            assert f"/{len(data) / 1e3:.1f} kB" in numbers and "kB/s" in numbers and "escape: cancel" in numbers
            await pilot.press("question_mark")  # the rest of the app answers meanwhile
            assert isinstance(app.screen, HelpScreen) and screen.downloading
            await pilot.press("escape")
            assert app.screen is screen
            await until(pilot, lambda: screen.info is not None, "the source shows once downloaded")
            await settled(pilot)
            assert not bar.display and "count_ready" in str(screen.query_one("#source-title", Static).render())


async def test_escape_cancels_the_download_and_nothing_is_kept(stripped, monkeypatch, tmp_path):
    binary, data, build_id = stripped
    cache = tmp_path / "debuginfod_cache_path"
    with ServedFile(data, build_id, chunk=2048, delay=30) as server:  # stalls after the first chunk
        monkeypatch.setenv("DEBUGINFOD_URLS", server.url)
        app = KprobeTui(locate(), BinaryCatalog(str(binary)))
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_source(pilot, "count_ready")
            bar = screen.query_one(DownloadBar)
            await until(pilot, lambda: bar.display and screen.downloading, "the download starts")
            await pilot.press("escape")
            await until(pilot, lambda: screen.fallback, "the screen says the download stopped")
            assert app.screen is screen and not bar.display
            title = str(screen.query_one("#source-title", Static).render())
            assert "cancelled; nothing of it was kept" in title
            assert [p.name for p in cache.rglob("*") if p.is_file()] == []
            await pilot.press("escape")  # now escape goes back
            assert not isinstance(app.screen, SourceScreen)
