"""The Textual app: screens on top of the pure cores. It owns the kernel sources and the catalog."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.catalog import Catalog, source_function
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.tui.screens.builder import ProbeBuilderScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.functions import FunctionsScreen
from kprobe_tui.tui.screens.source import DebugTarget, SourceScreen

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
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("e", "tail_all", "Events"),
    ]

    def __init__(self, sources: KernelSources, binary: BinaryCatalog | None = None,
                 vmlinux: str | None = None, source_dir: str | None = None) -> None:
        """``binary``: the -x mode, browsing (and probing with uprobes) one program or library.
        ``vmlinux`` and ``source_dir``: where the source view finds kernel debug info and source text."""
        super().__init__()
        self.sources = sources
        self.binary = binary
        self.vmlinux = vmlinux
        self.source_dir = source_dir
        self.catalog: Catalog | BinaryCatalog | None = None
        self.sub_title = f"uprobes in {binary.path}" if binary else f"{'kernel' if sources.live else 'snapshot of'} {sources.release}"

    def load_catalog(self) -> Catalog | BinaryCatalog:
        """Runs in a worker thread: the first paint does not wait for 100k symbols."""
        self.catalog = self.binary or Catalog(self.sources)
        return self.catalog

    def on_mount(self) -> None:
        self.push_screen(FunctionsScreen(self.load_catalog))

    def open_builder(self, function: str, line: int | None = None) -> None:
        """The probe builder on ``function``; ``line`` (relative, as perf -L numbers it) makes a line probe."""
        self.push_screen(ProbeBuilderScreen(function, binary=str(self.binary.path) if self.binary else None,
                                            sources=self.sources, line=line, vmlinux=self.vmlinux))

    def tail(self, events: list[str]) -> None:
        """The events screen on ``events`` (``group/event`` patterns; [] = every probe event)."""
        try:
            tracefs = self.sources.tracing()
        except UserError as exc:
            self.notify(str(exc), title="Cannot tail", severity="error")
            return
        self.push_screen(EventsScreen(events, tracefs))

    def action_tail_all(self) -> None:
        if not isinstance(self.screen, EventsScreen):
            self.tail([])

    def on_probe_builder_screen_created(self, message: ProbeBuilderScreen.Created) -> None:
        self.tail(message.events)

    def on_source_screen_probe_line(self, message: SourceScreen.ProbeLine) -> None:
        self.open_builder(message.function, line=message.line)

    def open_source(self, function: str) -> None:
        if self.binary is not None:
            target = DebugTarget(binary=str(self.binary.path), source_dir=self.source_dir)
        else:
            target = DebugTarget(vmlinux=self.vmlinux, source_dir=self.source_dir)
        self.push_screen(SourceScreen(target, source_function(function)))


def run_app(args) -> int:
    from kprobe_tui.kernel import sources

    binary = BinaryCatalog(args.exec_binary) if getattr(args, "exec_binary", None) else None
    KprobeTui(sources.from_args(args), binary, vmlinux=args.tui_vmlinux, source_dir=args.tui_source).run()
    return 0
