"""The Textual app: screens on top of the pure cores. It owns the kernel sources, the catalog, the
run's tracing session (a service screens ask) and navigation (screens post what they want: navigation.py)."""

from __future__ import annotations

import gc
import os
import shlex
import sys
import termios
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.app import App
from textual.binding import Binding
from textual.theme import Theme

from kprobe_tui import blocking, config
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import access, lifetime, sources
from kprobe_tui.kernel.catalog import Catalog, source_function
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.textsafe import printable
from kprobe_tui.tui import theming
from kprobe_tui.tui.commands import ActionsProvider
from kprobe_tui.tui.keys import KeyRouter
from kprobe_tui.tui.navigation import Back, EditProbe, OpenBuilder, OpenGraph, OpenSource, OpenStats, ShowEvents
from kprobe_tui.tui.screens.builder import EditBuilder, ProbeBuilderScreen
from kprobe_tui.tui.screens.calltree import CallGraphScreen
from kprobe_tui.tui.screens.doctor import DoctorScreen
from kprobe_tui.tui.screens.events import EventsScreen
from kprobe_tui.tui.screens.flame import FlameScreen, OpenFlame
from kprobe_tui.tui.screens.functions import FunctionsScreen
from kprobe_tui.tui.screens.help import HelpScreen
from kprobe_tui.tui.screens.probes import ProbesScreen
from kprobe_tui.tui.screens.source import DebugTarget, SourceScreen
from kprobe_tui.tui.screens.stats import StatsScreen, handoff
from kprobe_tui.tui.tracing import RunTracing

if TYPE_CHECKING:  # an annotation: the view asks the core's API, not tracefs
    from kprobe_tui.kernel.tracefs import Tracefs


class KprobeTui(App):
    """Screens ask the app for shared state (sources, catalog, the tracing session) and, by message, to go elsewhere."""

    TITLE = "kprobe-tui"
    CSS_PATH = theming.LAYOUT
    COMMANDS = App.COMMANDS | {ActionsProvider}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("e", "tail_all", "Events"),
        Binding("l", "list_probes", "Probes"),
        Binding("D", "doctor", "Doctor", show=False),  # listed by help and the palette
        Binding("question_mark", "help", "Help", show=False),  # every footer shows it docked (KeyFooter)
        Binding("f1", "help", "Help", show=False, priority=True),  # also while typing in a box
    ]
    tracing: RunTracing | None = None  # made by the first screen that records (RunTracing.of)

    def __init__(self, sources: KernelSources, binary: BinaryCatalog | None = None,
                 vmlinux: str | None = None, source_dir: str | None = None, theme: str = config.DEFAULT_THEME,
                 remember_in: Path | None = None, notes: tuple[str, ...] = ()) -> None:
        """``binary``: the -x mode, browsing (and probing with uprobes) one program or library.
        ``vmlinux`` and ``source_dir``: where the source view finds kernel debug info and source text.
        ``theme``: a themes/ file; a theme chosen later is saved in the config file ``remember_in``.
        ``notes``: warnings to show once the screen is up (a broken config file)."""
        super().__init__()
        themes = theming.textual_themes()
        self.theme_names = list(themes)
        self._monochrome = {name for name, (_, monochrome) in themes.items() if monochrome}
        for textual_theme, _ in themes.values():
            self.register_theme(textual_theme)
        self.theme = theme
        for name in set(self.available_themes) - set(themes):  # only ours: the palette offers what --theme takes
            self.unregister_theme(name)
        self._two_tone = theming.TwoTone()
        self._keys = KeyRouter(self, super().on_event)
        self.remember_in = remember_in
        self.notes = notes
        self.sources = sources
        self.binary = binary
        self.vmlinux = vmlinux
        self.source_dir = source_dir
        self.catalog: Catalog | BinaryCatalog | None = None
        sub_title = f"uprobes in {binary.path}" if binary else f"{'kernel' if sources.live else 'snapshot of'} {sources.release}"
        self.access = access.decide(sources)  # what this user can do here, and why not
        if not self.access.can_create:
            sub_title = f"LAB MODE: read-only — {self.access.can_create.why_not}"
        if self.access.reader_note():  # a student tails through perf_event_open: said where events come from
            sub_title += f" │ {self.access.reader_note()}"
        self.sub_title = printable(sub_title)  # a path, a snapshot's release: anyone's text

    def load_catalog(self) -> Catalog | BinaryCatalog:
        """Runs in a worker thread: the first paint does not wait for 100k symbols."""
        self.catalog = self.binary or Catalog(self.sources)
        return self.catalog

    def _freeze_when_warm(self) -> None:
        """The warm catalog's objects live as long as the app: frozen, Python's full collections no
        longer walk them (each took ~100 ms, about two per screen change: the outliers in
        benchmarks/bench_tui_flow.py; ~50 ms when frozen)."""
        if self.catalog is None or not self.catalog.details_ready:
            return
        self._gc_timer.stop()
        gc.collect()  # once, while the list is read: garbage frozen now would never be freed
        gc.freeze()

    def on_mount(self) -> None:
        blocking.ui_thread(threading.get_ident())  # DWARF, compiles and tracefs writes are workers' work
        self.push_screen(FunctionsScreen(self.load_catalog))
        self._gc_timer = self.set_interval(0.25, self._freeze_when_warm)
        if not self.access.can_create:
            # 8 s, not 30: the notice lies over the why-pane and the source's buttons (the title keeps saying it)
            self.notify(self.access.banner(), title="Lab mode", severity="warning", timeout=8)
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        for note in self.notes:
            self.notify(note, title="Config", severity="warning", timeout=15)

    def on_unmount(self) -> None:
        if self.tracing is not None:  # its screens closed it already, unless one was still starting it
            self.tracing.close()
        blocking.ui_thread(None)  # the run's undo (probes, the instance) runs on this thread next

    async def on_event(self, event: events.Event) -> None:
        """Keys one at a time (keys.py): each goes where the focus is once the one before has landed."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            if not self._keys.take(event):
                await self._keys.route(event)
            return
        await super().on_event(event)

    def notify(self, message: str, *, title: str = "", severity="information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every notification (widgets' and screens' too: they call this) shows its text as data: our
        messages quote paths, names and kernel errors, so none is parsed as markup, none carries a control."""
        super().notify(printable(message, keep="\n"), title=printable(title), severity=severity, timeout=timeout,
                       markup=False)

    def get_line_filters(self):
        filters = list(super().get_line_filters())
        return filters + [self._two_tone] if self.theme in self._monochrome else filters

    def _remember_theme(self, theme: Theme) -> None:
        problem = config.remember("theme", theme.name, self.remember_in) if self.remember_in is not None else None
        if problem:
            self.notify(problem, title="Config", severity="warning")

    # --- navigation: screens post what they want, the app pushes and pops ------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def on_open_builder(self, message: OpenBuilder) -> None:
        """The probe builder on a function (``line``: a line probe; else ``kind``; ``variable``: prefilled)."""
        self.push_screen(ProbeBuilderScreen(message.function, binary=str(self.binary.path) if self.binary else None,
                                            sources=self.sources, line=message.line, variable=message.variable,
                                            vmlinux=self.vmlinux, kind=message.kind,
                                            lab_reason=self.access.can_create.why_not or None,
                                            module=self._module_of(message.function), catalog=self._kernel_catalog()))

    def on_edit_probe(self, message: EditProbe) -> None:
        """The builder prefilled from a probe's definition; its Create replaces that probe."""
        screen = EditBuilder(message.event, message.target, sources=self.sources, vmlinux=self.vmlinux,
                             catalog=self._kernel_catalog())
        self.push_screen(screen)

    def _kernel_catalog(self) -> Catalog | None:
        return self.catalog if self.binary is None and isinstance(self.catalog, Catalog) else None

    def _module_of(self, function: str) -> str | None:
        """The kernel module a function is in (its source view and probes use the module's debug info)."""
        return (self.catalog.module(function) or None) if self.binary is None and self.catalog is not None else None

    def on_open_source(self, message: OpenSource) -> None:
        function = message.function
        if self.binary is not None:
            target = DebugTarget(binary=str(self.binary.path), source_dir=self.source_dir)
        else:
            target = DebugTarget(vmlinux=self.vmlinux, source_dir=self.source_dir, module=self._module_of(function),
                                 snapshot_of=None if self.sources.live else self.sources.release)
        catalog = self.catalog
        prototype = (lambda: catalog.function(function).prototype) if catalog is not None else None
        self.push_screen(SourceScreen(target, source_function(function), symbol=function, prototype=prototype))

    def on_show_events(self, message: ShowEvents) -> None:
        """The events screen open below comes back up, recording ``patterns`` too; else a new one records them."""
        shown = next((screen for screen in reversed(self.screen_stack)
                      if isinstance(screen, EventsScreen) and screen.session is not None), None)
        if shown is not None and self.tracing is not None:
            if message.patterns:
                self.tracing.add(message.patterns, failed=lambda exc: self.notify(str(exc), title="Cannot tail",
                                                                                  severity="error"))
            while self.screen is not shown:
                self.pop_screen()
            return
        tracefs = self._tracefs("Cannot tail")
        if tracefs is not None:
            self.push_screen(EventsScreen(message.patterns, tracefs))

    def _tracefs(self, title: str) -> Tracefs | None:
        """The live tracefs, or None with the reason shown under ``title``."""
        try:
            return self.sources.tracing()
        except UserError as exc:
            self.notify(str(exc), title=title, severity="error")
            return None

    def _hand_off(self, title: str, why_not: str, command: str) -> None:
        """In lab mode: the command that answers, copied for an administrator (OSC 52), and why."""
        self.copy_to_clipboard(command)
        self.notify(f"lab mode: {why_not}. Copied for an administrator: {command}", title=title, severity="warning",
                    timeout=30)

    def on_open_stats(self, message: OpenStats) -> None:
        """The statistics view, or in lab mode the command an administrator runs."""
        request = message.request
        if not self.access.can_aggregate:
            if not (request.event and self.access.reader.kind.startswith("perf")):
                self._hand_off("Statistics", self.access.can_aggregate.why_not, handoff(request))
                return
            request = request.as_existing()  # the administrator's event, read as perf record reads it
        self.push_screen(StatsScreen(request, self.sources))

    def on_open_graph(self, message: OpenGraph) -> None:
        """The call tree screen, or in lab mode the command an administrator runs."""
        if not self.access.can_create:
            self._hand_off("Graph", self.access.can_create.why_not,
                           f"sudo kprobe-tui graph {shlex.quote(message.function)} --duration 5")
            return
        tracefs = self._tracefs("Cannot graph")
        if tracefs is not None:
            self.push_screen(CallGraphScreen(message.function, tracefs))

    def on_open_flame(self, message: OpenFlame) -> None:
        self.push_screen(FlameScreen(message.stacks, message.title))

    def on_back(self, message: Back) -> None:
        if len(self.screen_stack) > 2:  # the default screen, and the first of ours, stay
            self.pop_screen()

    def action_list_probes(self) -> None:
        """The probes panel: every dynamic event on the system, ours marked, with hit counts."""
        if isinstance(self.screen, ProbesScreen):
            return
        tracefs = self._tracefs("Cannot list probes")
        if tracefs is not None:
            self.push_screen(ProbesScreen(tracefs, self.access))

    def action_doctor(self) -> None:
        """What this kernel and this user allow (``kprobe-tui doctor``), as a screen."""
        if not isinstance(self.screen, DoctorScreen):
            self.push_screen(DoctorScreen(self.sources, str(self.binary.path) if self.binary else None))

    def action_tail_all(self) -> None:
        if not isinstance(self.screen, EventsScreen):
            self.post_message(ShowEvents([]))


def run_app(args) -> int:
    binary = BinaryCatalog(args.binary) if getattr(args, "binary", None) else None
    theme, notes = config.choose_theme(args.theme)
    if args.theme is not None:
        remembered = config.remember("theme", args.theme)
        if remembered:
            notes.append(remembered)
    app = KprobeTui(sources.from_args(args), binary, vmlinux=args.vmlinux, source_dir=args.source_dir,
                    theme=theme, remember_in=config.config_path(), notes=tuple(filter(None, notes)))
    # SIGTERM and SIGHUP end the run through lifetime's undo (probes, the unpacked snapshot): the
    # terminal is one more thing to give back before the process dies of the signal.
    restore = lifetime.undo.push("the terminal's modes", lambda: restore_terminal(app))
    try:
        app.run()
    finally:
        lifetime.undo.discard(restore)
    if app.return_code:  # Textual printed the traceback: a crash is never a success
        print("kprobe-tui: internal error (the traceback is above)\n"
              "  hint: this is a bug in kprobe-tui; please report it with the traceback", file=sys.stderr)
        return 70
    return 0


# What Textual's driver undoes on a normal exit, as one write: end a synchronized update, mouse and
# focus reporting off, bracketed paste off, the kitty keyboard mode popped, line wrap on, the main
# screen back, the cursor shown.
TERMINAL_RESET = (b"\x1b[?2026l\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1004l\x1b[?2004l\x1b[?2048l"
                  b"\x1b[<u\x1b[?7h\x1b[?1049l\x1b[?25h")


def restore_terminal(app: App) -> None:
    """Leave the terminal usable from a signal handler, where Textual's own exit cannot run: one write
    straight to the terminal (not through Textual's writer thread, whose queue may be full of a frame
    nobody will flush) and the terminal's saved line settings back (echo, line editing)."""
    driver = app._driver  # noqa: SLF001  (Textual keeps it private; only it knows the saved settings)
    saved = getattr(driver, "attrs_before", None)
    terminal_out, terminal_in = sys.__stderr__, sys.__stdin__
    if driver is None or saved is None or terminal_out is None or terminal_in is None:  # not in application mode
        return
    try:
        os.write(terminal_out.fileno(), TERMINAL_RESET)  # where Textual's driver writes
    except OSError:
        pass  # SIGHUP: the terminal is gone
    try:
        termios.tcsetattr(terminal_in.fileno(), termios.TCSANOW, saved)
    except (OSError, termios.error):
        pass
