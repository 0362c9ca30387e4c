"""``?`` (or F1): help for the screen underneath, and the golden rule of tracing.

The keys are read from the live BINDINGS of the screen, its widgets and the app, so they cannot go
stale; what each screen is for is hand-written, here in ``HELP`` (keyed by screen class name, one
place to keep up to date, checked by a test to cover every screen).
"""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from kprobe_tui.tui.theming import LAYOUT

HELP: dict[str, tuple[str, str]] = {  # screen class -> (title, what it is for)
    "FunctionsScreen": (
        "Functions",
        ("Every function you can put a probe on, and why the others cannot be probed. Type after / to "
         "filter (substring; * ? [ make it a glob; ctrl+t cycles substring, glob and fuzzy): everything typed "
         "after /, however fast, goes to the filter, where up, down and the page keys move the highlight, Enter "
         "opens it and escape goes back to the list, keeping the filter. On the list, letters are actions (no "
         "type-ahead): Enter opens the source, p the probe builder. The colour and glyph of each name give "
         "its status, the pane below explains it."),
    ),
    "SourceScreen": (
        "Source",
        ("The function's source, its probeable lines numbered as perf probe -L numbers them; beside it the "
         "variables you can capture at the cursor's line (v: where each one lives: register, stack, "
         "optimised away). Enter or a click on a probeable line builds a probe there. Without debug info "
         "it shows the BTF prototype and Entry / Return buttons instead."),
    ),
    "ProbeBuilderScreen": (
        "Probe builder",
        ("Choose the kind (entry, return, a line, an offset, fprobe), the arguments in perf syntax "
         "(var, ptr->member, name:string, $retval) and a filter. The tracefs definition and the equivalent "
         "perf probe and bpftrace commands update as you type, errors point at the offending token. Create "
         "makes the probe for this run (removed on exit) and opens its events; Pin keeps it after exit. "
         "In a field letters are text: escape leaves it for the buttons, escape again goes back."),
    ),
    "EventsScreen": (
        "Events",
        ("The live events of this run's probes, read in kprobe-tui's own trace instance. / filters "
         '(comm == "sshd" && len > 100 || event ~ "tcp_*"; pushed to the kernel where it can be), p pauses, '
         "Enter shows one event whole, s its kernel stack, End follows the newest, x and X export. A probe "
         "of a source line shows as the line (work:3), whichever of its addresses fired; its event name, "
         "which a filter's event field matches, is in the detail. Over SSH, once an event of your own sshd shows "
         "its socket (a probe capturing sk), o filters to your own connection, and again leaves it out."),
    ),
    "ProbesScreen": (
        "Probes",
        ("Every dynamic event on the system, kprobe-tui's marked, with hit and miss counts updating live. "
         "Enable, disable, edit and delete ours; others' probes are read-only unless you insist."),
    ),
    "DoctorScreen": (
        "Doctor",
        ("What this kernel and this user allow, as kprobe-tui doctor reports it: the probe kinds, what arguments "
         "can be read, where the function list's facts come from and where debug info is found. A line marked "
         "-- says what is missing and what to do about it."),
    ),
    "StatsScreen": (
        "Statistics",
        ("Answers about many hits at once, as kprobe-tui count, hist and latency give them: hits per key "
         "(most first), a captured value's histogram or a function's entry-to-return latency, with bars as "
         "bpftrace draws them, refreshed every second. k chooses the key (none, comm, pid, a captured field, "
         "the stack: a latency's at the entry), "
         "v the value (count, a field, latency), b log2 or linear buckets (linear over the values seen; r types "
         "a range, MIN,MAX,STEP, as bpftrace's lhist), i the last second or everything "
         "since the start, f a flame graph when counted by stack. Up and down (page up/down, the wheel) scroll "
         "the keys that do not fit. The line under the title says which engine runs and why: the kernel's hist "
         "triggers where it has them, else events aggregated here. Its probes go when you leave."),
    ),
    "CallGraphScreen": (
        "Call graph",
        ("What a kernel function calls, as kprobe-tui graph answers it: the kernel's function_graph tracer "
         "follows the function for 5 s on every thread but ours, then each call path is one row: calls, total "
         "and self time in microseconds (self: not spent in a callee). Escape stops early, r runs again, enter "
         "opens the highlighted function's source. e runs again reading return values (a return probe on "
         "the function and on the functions it calls): a path's error codes, and <- first where "
         "a failing call's first error came from. The tracer is the kernel's only one: it is borrowed only "
         "when idle and given back as found."),
    ),
    "FlameScreen": (
        "Flame graph",
        ("Where the counted stacks go, drawn as an icicle: the outermost callers at the top, each frame as wide "
         "as its share of the count, its callees below it, sorted by name. The arrows move the cursor (down: the "
         "widest callee), a click selects, enter zooms into a frame (its callers stay above, full width), escape "
         "or backspace zooms back out, / marks the frames whose name holds a text and says their share, "
         "s opens the frame's function's source. The bottom line says the frame's count and share."),
    ),
}

GOLDEN_RULE = (
    "Never cause, once per traced event, an event you also trace.\n\n"
    "Showing an event writes to your terminal. Over SSH that write goes through the pty, sshd and TCP: "
    "a probe on tcp_sendmsg fires for our own output, which we show, which sends more packets, which fire "
    "again, a flood that can take the connection down.\n\n"
    "What kprobe-tui does about it: every probe it makes leaves out its own PID (common_pid != ours, in its "
    "own trace instance too); over SSH, a probe on the path our output takes (TCP, IP, tty and pty "
    "writes, read/write/poll) is flagged by the feedback guard, needs a second Create, and the filter that "
    "also leaves out your SSH session's sshd is offered. Softirq network work cannot be filtered by PID: "
    "prefer a filter on the port or the process you study."
)


def help_for(screen_class: type[Screen]) -> tuple[str, str]:
    """(title, purpose) of a screen; a subclass (the probes panel's edit builder) shares its parent's."""
    for cls in screen_class.__mro__:
        if cls.__name__ in HELP:
            return HELP[cls.__name__]
    return screen_class.__name__, ""


def own_bindings(node: DOMNode) -> list[Binding]:
    """The bindings ``node``'s classes declare in kprobe-tui (inherited ones too, a subclass's first);
    Textual's generic ones (focus cycling, scrolling) are left to its own docs."""
    seen: dict[str, Binding] = {}
    for cls in type(node).__mro__:
        if cls.__module__.startswith("kprobe_tui.") and "BINDINGS" in cls.__dict__:
            for key, binding in BindingsMap(cls.__dict__["BINDINGS"]):
                seen.setdefault(key, binding)
    by_action: dict[str, list[Binding]] = {}
    for binding in seen.values():  # one row per action: "up, k" rather than two rows
        by_action.setdefault(binding.action, []).append(binding)
    return [bindings[0].with_key(",".join(b.key for b in bindings)) for bindings in by_action.values()]


def _keys_table(app, bindings: list[Binding]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for binding in bindings:
        keys = ", ".join(app.get_key_display(binding.with_key(key)) for key in binding.key.split(","))
        table.add_row(keys, binding.description or binding.action.replace("_", " "))
    return table


class HelpScreen(ModalScreen):
    """Help about ``screen``: its purpose, its keys (and its widgets'), the app's, the golden rule."""

    CSS_PATH = LAYOUT
    BINDINGS: ClassVar = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.about = screen

    def compose(self) -> ComposeResult:
        title, purpose = help_for(type(self.about))
        with VerticalScroll(id="help"):
            yield Static(Text(f"Help: {title}", style="bold"), classes="help-body")
            yield Static(purpose, classes="help-body", markup=False)
            yield Static(Text(f"The golden rule: {GOLDEN_RULE.split(chr(10))[0]} (why, and what kprobe-tui does: "
                              "at the end)", style="bold"), classes="help-heading")
            yield Static("Keys on this screen", classes="help-heading")
            yield Static(_keys_table(self.app, self._screen_bindings()), classes="help-body")
            yield Static("Keys everywhere", classes="help-heading")
            yield Static("In a text field (a filter, the builder's form) a letter or ? is text: F1, ctrl+c and "
                         "ctrl+p work there too; Escape leaves the field, and a second Escape goes back.",
                         classes="help-body", markup=False)
            app_bindings = own_bindings(self.app) + [Binding("ctrl+p", "command_palette", "Every action, themes")]
            yield Static(_keys_table(self.app, app_bindings), classes="help-body")
            yield Static("The golden rule of tracing", classes="help-heading")
            yield Static(GOLDEN_RULE, classes="help-body", markup=False)
        yield Footer()  # no Help key on help itself

    def on_mount(self) -> None:
        self.query_one("#help").focus()

    def _screen_bindings(self) -> list[Binding]:
        """The screen's own keys, then its widgets' (each key once: the screen's wins)."""
        bindings = own_bindings(self.about)
        keys = {key for binding in bindings for key in binding.key.split(",")}
        for widget in self.about.query("*"):
            for binding in own_bindings(widget):
                fresh = [key for key in binding.key.split(",") if key not in keys]
                if fresh:
                    bindings.append(binding.with_key(",".join(fresh)))
                    keys.update(fresh)
        return bindings
