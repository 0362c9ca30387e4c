"""The Textual app: screens on top of the pure cores. It owns the kernel sources and the catalog."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding

from kprobe_tui import __version__
from kprobe_tui.kernel.catalog import Catalog
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.tui.screens.functions import FunctionsScreen


_PACKAGE = Path(__file__).resolve().parents[1]


def theme_path(name: str = "default") -> Path:
    """themes/ beside the package in a checkout; installed wheels carry it as kprobe_tui/themes."""
    for directory in (_PACKAGE.parent / "themes", _PACKAGE / "themes"):
        if (directory / f"{name}.tcss").exists():
            return directory / f"{name}.tcss"
    raise FileNotFoundError(f"theme {name}.tcss is missing from this installation")


class KprobeTui(App):
    """Screens ask the app for shared state (sources, catalog) and for navigation."""

    TITLE = "kprobe-tui"
    CSS_PATH = theme_path()
    BINDINGS = [Binding("q", "quit", "Quit"), Binding("ctrl+c", "quit", "Quit", show=False, priority=True)]

    def __init__(self, sources: KernelSources) -> None:
        super().__init__()
        self.sources = sources
        self.catalog: Catalog | None = None
        self.sub_title = f"{'kernel' if sources.live else 'snapshot of'} {sources.release}"

    def load_catalog(self) -> Catalog:
        """Runs in a worker thread: the first paint does not wait for 100k symbols."""
        self.catalog = Catalog(self.sources)
        return self.catalog

    def on_mount(self) -> None:
        self.push_screen(FunctionsScreen(self.load_catalog))

    def open_source(self, function: str) -> None:
        self.notify(
            f"The source view of {function} needs debug info for the running kernel (kprobe-tui lines -k VMLINUX {function}).",
            title="Source",
        )


def run_app(args) -> int:
    from kprobe_tui.kernel import sources

    KprobeTui(sources.from_args(args)).run()
    return 0
