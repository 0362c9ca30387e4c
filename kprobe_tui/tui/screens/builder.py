"""The probe builder: one function, a kind, what to capture and a filter; what it compiles to, live.

Every change schedules a recompile off the UI thread (debounced, the newest request wins), so
DWARF lookups never block typing. The variables at the probe point are a tree with checkboxes;
the Args input is the single truth about what is captured: ticking a node appends its expression
(``rec->name:string``) to Args, unticking removes that word, a type override (``t``) rewrites
it as ``expr:type``, and a node shows ticked exactly when its expression is a word of Args (so
typing ``sum`` ticks ``sum``). The preview shows the tracefs line(s) next to the equivalent
``perf probe`` and ``bpftrace`` commands, each copyable. Create makes the probes in the chosen
group (by default this run's, removed when the run ends); Pin moves them to the persistent group.
In lab mode (no write access to tracefs) Create becomes "Copy for admin".
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.suggester import Suggester
from textual.widgets import Button, Footer, Header, Input, Select, Static, Tree

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import capabilities, lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.kernel.tracefs import KernelRefused
from kprobe_tui.probes import guard
from kprobe_tui.probes.capture import (
    VariableNode,
    btf_variables,
    children,
    dwarf_variables,
    next_type,
    retval_node,
)
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.render import admin_handoff
from kprobe_tui.probes.spec import (
    DEFAULT_PERSISTENT_GROUP,
    MAX_EVENT_NAME_LEN,
    check_filter_text,
    check_group,
    check_name,
    check_text,
    parse_spec,
)
from kprobe_tui.stream import filterexpr
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.widgets.probe_preview import Mark, Preview, ProbePreview
from kprobe_tui.tui.widgets.variable_tree import VariableTree

DEBOUNCE_SECONDS = 0.15
WIDE_COLUMNS = 120  # from here the tree and the preview sit side by side

# Every compile runs on this one thread: pyelftools reads through shared stream positions, so
# two DWARF questions about one file must never run at once.
_COMPILER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kprobe-tui-compile")

KINDS = {  # kind -> (label, what the number box takes, or None)
    "entry": ("entry", None),
    "return": ("return", None),
    "line": ("line", "line, from the function's first"),
    "offset": ("offset", "+bytes into the function"),
    "fprobe": ("fprobe", None),
    "fprobe_exit": ("fprobe exit", None),
}
# Fields every event has that the kernel's filter knows (besides the probe's own arguments).
COMMON_FIELDS = ("common_pid", "comm", "common_flags", "common_preempt_count", "common_type", "CPU")
_NAME_PREFIX = re.compile(r"^[A-Za-z_]\w*=")


@dataclass(frozen=True)
class BuildRequest:
    """What the form says; compiled off the UI thread."""

    function: str
    binary: str | None
    kind: str
    number: str = ""
    args: str = ""
    filter: str = ""
    vmlinux: str | None = None  # kernel DWARF: line probes and locals in kernel functions
    event: str = ""  # "" = the generated name
    group: str = ""  # "" = this run's group
    lab: bool = False  # lab mode: no guard filter (nobody here displays them yet), admin lines instead
    module: str | None = None  # the kernel module the function is in: its DWARF, and MODULE:func places

    def place(self) -> str:
        if self.kind in ("line", "offset"):
            what = "line" if self.kind == "line" else "offset"
            text = self.number.strip().removeprefix("+")
            if not text:
                raise UserError(f"{what}: no number given", f"type the {KINDS[self.kind][1]} in the box after the kind")
            try:
                value = int(text, 0)
            except ValueError:
                raise UserError(f"{self.number.strip()!r}: not a number", f"the {what} is decimal or 0x-hex") from None
            return f"{self.function}:{value}" if self.kind == "line" else f"{self.function}+{value}"
        return self.function + ("%return" if self.kind in ("return", "fprobe_exit") else "")

    def words(self) -> list[str]:
        check_text(self.args, "Args")
        try:
            return [self.place(), *shlex.split(self.args)]
        except ValueError as exc:  # an unclosed quote
            raise UserError(f"{self.args.strip()!r}: {exc}", "close the quote, or drop it") from None

    def fields(self) -> dict[str, str]:
        """The form's text boxes by name, where an error's token is looked for."""
        return {"args": self.args, "filter": self.filter, "event": self.event, "group": self.group, "number": self.number}


def build_preview(request: BuildRequest, events: Events | None, readme: str, btf_path: str | None) -> Preview:
    """Parse, guard and compile a request; any UserError becomes the preview, its token marked."""
    root = str(events.tracefs.root) if events is not None else "/sys/kernel/tracing"
    try:
        own_group = None if request.lab else lifetime.run_name()
        group = check_group(request.group.strip(), own=own_group) if request.group.strip() else own_group or DEFAULT_PERSISTENT_GROUP
        spec = parse_spec(request.words(), binary=request.binary, fprobe=request.kind.startswith("fprobe"), group=group,
                          module=request.module)
        if request.event.strip():
            spec = replace(spec, event=check_name(request.event.strip(), "event", MAX_EVENT_NAME_LEN))
        advice = guard.advise(spec)  # our own PID: showing its events must not cause more of them
        own = None if request.lab else advice.filter
        spec = replace(spec, filter=guard.combine_filters(request.filter.strip(), own))
        if spec.filter:
            check_filter_text(spec.filter)
        taken = _taken_names(events, group)
        probes = compile_spec(spec, group, taken, readme=readme, vmlinux=request.vmlinux, btf_path=btf_path)
        if request.filter.strip():
            check_filter(request.filter, [a.name for a in probes[0].args])
    except UserError as exc:
        mark = _mark(exc, request)
        if isinstance(exc, filterexpr.FilterError):  # its own caret drawing is replaced by the marked token
            exc = UserError(f"filter error at column {exc.position + 1}: {exc.problem}", exc.hint)
        return Preview(error=exc, tracefs_root=root, mark=mark)
    admin = admin_handoff(spec, probes, _login_name(), root) if request.lab else []
    return Preview(spec, probes, advice, tracefs_root=root, admin=admin)


def _login_name() -> str:
    """This user's account name from the password database (not $USER: the environment is the user's to set)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _readable(tracefs, rel: str) -> str:
    """A tracefs file's text, or "" where it is missing or this user may not read it (lab mode)."""
    try:
        return tracefs.read(rel) if tracefs is not None and tracefs.exists(rel) else ""
    except UserError:
        return ""


def _taken_names(events: Events | None, group: str) -> list[str]:
    """Event names already in the group; none known when tracefs cannot be listed (the kernel refuses duplicates)."""
    try:
        return [e.event for e in events.events_in(group)] if events is not None else []
    except UserError:
        return []


class FilterFieldError(UserError):
    """A filter naming a field the event will not have; ``position`` is where in the filter."""

    def __init__(self, message: str, hint: str, position: int) -> None:
        super().__init__(message, hint)
        self.position = position


def check_filter(text: str, arg_names: list[str]) -> None:
    """Our filter grammar, and field names the kernel will know for this event (its args, common_*)."""
    node = filterexpr.parse(text)
    known = [*arg_names, *COMMON_FIELDS]
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, filterexpr.BoolOp):
            stack += [node.right, node.left]
        elif isinstance(node, filterexpr.Not):
            stack.append(node.operand)
        elif isinstance(node, filterexpr.Compare) and node.field not in known:
            raise FilterFieldError(f"{node.field!r}: this event has no such field", f"its fields: {', '.join(known)}",
                                   node.position)


def _mark(exc: UserError, request: BuildRequest) -> Mark | None:
    """The token an error is about, in the box it was typed in: the longest word the message names."""
    if isinstance(exc, (filterexpr.FilterError, FilterFieldError)):
        return _word_mark("filter", request.filter, exc.position)
    best: Mark | None = None
    for box, text in request.fields().items():
        for match in re.finditer(r"\S+", text):
            word = match.group()
            expression = expression_of(word)[1] or word
            named = re.search(rf"(?<![\w>.-]){re.escape(expression)}(?!\w)", exc.message)
            if named and (best is None or len(word) > best.end - best.start):
                start = len(box) + 2 + match.start()
                best = Mark(f"{box}: {text}", start, start + len(word))
    return best


def _word_mark(box: str, text: str, position: int) -> Mark:
    end = re.match(r"\S*", text[position:]).end() + position
    shown = f"{box}: {text} "  # a trailing cell to mark when the error is at the very end
    return Mark(shown, len(box) + 2 + position, len(box) + 2 + max(end, position + 1))


def load_variables(request: BuildRequest, btf_path: str | None) -> tuple[list[VariableNode], str]:
    """The tree's roots at the request's place, or [] and what to do instead."""
    is_return = request.kind in ("return", "fprobe_exit")
    try:
        spec = parse_spec([request.place(), "$params"], binary=request.binary,
                          fprobe=request.kind.startswith("fprobe"), group="g", module=request.module)
        if request.binary or request.vmlinux or request.module:
            return dwarf_variables(spec, request.vmlinux), ""
        if request.kind in ("line", "offset"):
            return [], "kernel lines and offsets need DWARF (-k VMLINUX): type registers in Args (%di, $stack0)"
        return btf_variables(request.function, btf_path, is_return=is_return), ""
    except UserError as exc:
        registers = "type registers in Args (%di, $arg1, $stack0)"
        return ([retval_node()] if is_return else []), f"{exc.message}: {registers}"


class FieldSuggester(Suggester):
    """Completes the last word of a filter with the event's field names."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.names: list[str] = list(COMMON_FIELDS)

    async def get_suggestion(self, value: str) -> str | None:
        match = re.search(r"[A-Za-z_]\w*$", value)
        if match is None:
            return None
        word = match.group()
        found = next((name for name in self.names if name.startswith(word) and name != word), None)
        return value + found[len(word):] if found else None


def argument_words(args: str) -> list[str]:
    """Args split like the compiler splits it; an unclosed quote falls back to spaces."""
    try:
        return shlex.split(args)
    except ValueError:
        return args.split()


def expression_of(word: str) -> tuple[str, str, str | None]:
    """A word of Args as (NAME= prefix, expression, :TYPE or None)."""
    prefix = _NAME_PREFIX.match(word)
    head = prefix.group() if prefix else ""
    expression, _, type_ = word[len(head):].partition(":")
    return head, expression, type_ or None


def join_words(words: list[str]) -> str:
    return " ".join(word if re.fullmatch(r"[^\s'\"\\]+", word) else shlex.quote(word) for word in words)


class ProbeBuilderScreen(Screen):
    """Build a probe on ``function`` (of ``binary`` with -x, else the kernel)."""

    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [(0, "-narrow"), (WIDE_COLUMNS, "-wide")]
    DEFAULT_CSS = """
    ProbeBuilderScreen #target {
        height: 1; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    ProbeBuilderScreen #lab { height: auto; padding: 0 1; color: $warning; }
    ProbeBuilderScreen .row { height: 1; }
    ProbeBuilderScreen .label { width: 9; padding: 0 0 0 1; color: $accent; }
    ProbeBuilderScreen .label.inner { width: 7; padding: 0 1; }
    ProbeBuilderScreen #kind { width: 16; }
    ProbeBuilderScreen #number { width: 12; margin-left: 1; }
    ProbeBuilderScreen #number-help { width: 1fr; padding: 0 1; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    ProbeBuilderScreen Input { width: 1fr; }
    ProbeBuilderScreen #work { height: 1fr; margin-top: 1; }
    ProbeBuilderScreen #tree-pane { height: 1fr; }
    ProbeBuilderScreen #tree-note { height: auto; padding: 0 1; color: $text-muted; }
    ProbeBuilderScreen #tree-note.-empty { display: none; }
    ProbeBuilderScreen #preview-box { height: auto; max-height: 8; border-top: solid $primary 40%; }
    ProbeBuilderScreen.-wide #work { layout: horizontal; }
    ProbeBuilderScreen.-wide #preview-box { height: 1fr; max-height: 100%; border-top: none; border-left: solid $primary 40%; }
    ProbeBuilderScreen #status { height: auto; max-height: 3; padding: 0 1; }
    ProbeBuilderScreen #status.error { color: $error; }
    ProbeBuilderScreen #status.warning { color: $warning; }
    ProbeBuilderScreen #buttons { height: 1; }
    ProbeBuilderScreen #buttons Button { margin-right: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "create", "Create"),
        Binding("ctrl+s", "handoff", "Copy for admin"),
        Binding("ctrl+g", "pin", "Pin (keep)"),
        Binding("f2", "copy('tracefs')", "Copy tracefs"),
        Binding("f3", "copy('perf')", "Copy perf"),
        Binding("f4", "copy('bpftrace')", "Copy bpftrace"),
        Binding("f6", "focus_variables", "Variables"),
        Binding("escape", "cancel", "Cancel"),
    ]

    class Created(Message):
        """Probes were created (not enabled: the events screen enables them in our own instance);
        ``events`` are ``group/event`` names."""

        def __init__(self, events: list[str]) -> None:
            super().__init__()
            self.events = events

    def __init__(
        self,
        function: str,
        *,
        binary: str | None = None,
        sources: KernelSources | None = None,
        line: int | None = None,
        variable: str | None = None,
        vmlinux: str | None = None,
        kind: str = "entry",
        lab_reason: str | None = None,
        module: str | None = None,
    ) -> None:
        """``line`` and ``variable`` prefill a line probe capturing that variable (from a source view);
        ``vmlinux`` is the kernel's debug info, for C-level probes in kernel functions; ``lab_reason``
        (why this user cannot write tracefs) turns Create into a hand-off to an administrator; ``module``:
        the kernel module the function is in (its debug info, and probes placed as MODULE:func)."""
        super().__init__()
        self.function = function
        self.vmlinux = vmlinux
        self.module = module or None
        self.lab_reason = lab_reason
        self.binary = os.path.abspath(binary) if binary else None  # resolved and checked by parse_spec
        self.tracefs = sources.tracing() if sources is not None and sources.tracefs is not None else None
        self.events = Events(self.tracefs) if self.tracefs is not None else None
        self.readme = _readable(self.tracefs, "README")
        self.btf_path = str(sources.btf_vmlinux) if sources is not None and not self.binary else None
        fprobe = not self.binary and sources is not None and capabilities.detect(sources).has("fprobe")
        self.kinds = [k for k in KINDS if not k.startswith("fprobe") or fprobe]
        self.initial_kind = "line" if line is not None else kind  # "return" from the source view's Return
        self.initial_number = str(line) if line is not None else ""
        self.initial_args = variable or ""
        self.preview: Preview | None = None
        self.created: list[str] = []
        self.suggester = FieldSuggester()
        self._confirmed: BuildRequest | None = None  # the request a guard warning was confirmed for
        self._place: tuple[str, str] | None = None  # (kind, number) the tree's variables are for
        self._variables_shown = False  # the tree has had its first variables
        self._requested: BuildRequest | None = None  # the form as last compiled
        self.initial_group = DEFAULT_PERSISTENT_GROUP if lab_reason else lifetime.run_name()
        # The first preview and tree need no typing: started now, they compile while Textual lays out
        # the new screen's widgets instead of after it (about half the wait to the first preview).
        self._opening = BuildRequest(function, self.binary, self.initial_kind, self.initial_number, self.initial_args,
                                     "", None if self.binary else vmlinux, "", self.initial_group, bool(lab_reason),
                                     self.module)
        self._opening_work = {  # the preview first: it is what Create will write
            "preview": _COMPILER.submit(build_preview, self._opening, self.events, self.readme, self.btf_path),
            "variables": _COMPILER.submit(load_variables, self._opening, self.btf_path),
        }

    def compose(self) -> ComposeResult:
        yield Header()
        where = f"uprobe  {self.binary} : {self.function}" if self.binary else f"kernel  {self.function}"
        yield Static(plain(where, style="bold"), id="target")
        if self.lab_reason:
            yield Static(plain(f"lab mode: {self.lab_reason}. Build the probe, then copy what to hand to an "
                               "administrator (ctrl+s)."), id="lab")
        with Horizontal(classes="row"):
            yield Static("Kind", classes="label")
            yield Select([(KINDS[k][0], k) for k in self.kinds], value=self.initial_kind, allow_blank=False,
                         compact=True, id="kind")
            yield Input(self.initial_number, placeholder="N", compact=True, id="number")
            yield Static("", id="number-help")
        with Horizontal(classes="row"):
            yield Static("Args", classes="label")
            yield Input(self.initial_args, placeholder="tick below, or type: var ptr->member name:string $retval %di",
                        compact=True, id="args")
        with Horizontal(classes="row"):
            yield Static("Event", classes="label")
            yield Input(placeholder="generated", compact=True, id="event")
            yield Static("Group", classes="label inner")
            yield Input(self.initial_group, placeholder=self.initial_group, compact=True, id="group")
        with Horizontal(classes="row"):
            yield Static("Filter", classes="label")
            yield Input(placeholder="e.g. n > 1 (tab completes fields; our own PID is always left out)",
                        suggester=self.suggester, compact=True, id="filter")
        with Vertical(id="work"):
            with Vertical(id="tree-pane"):
                yield VariableTree(id="variables")
                yield Static("loading variables…", id="tree-note")
            with VerticalScroll(id="preview-box"):
                yield ProbePreview(id="preview")
        yield Static("", id="status")
        with Horizontal(id="buttons"):
            if self.lab_reason:
                yield Button("Copy for admin", id="handoff", variant="primary", compact=True)
            else:
                yield Button("Create", id="create", variant="primary", compact=True)
                yield Button("Pin", id="pin", compact=True,
                             tooltip="create and keep after kprobe-tui exits (until kprobe-tui del)")
            yield Button("Cancel", id="cancel", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self._update_number_box()
        self.query_one("#args", Input).focus()
        self._recompile()

    def on_resize(self) -> None:
        """Side by side from 120 columns (HORIZONTAL_BREAKPOINTS); narrower, one line per command."""
        self.query_one(ProbePreview).set_compact(self.size.width < WIDE_COLUMNS)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("create", "pin"):
            return not self.lab_reason
        if action == "handoff":
            return bool(self.lab_reason)
        return True

    # --- the form -------------------------------------------------------------------------------

    def request(self) -> BuildRequest:
        return BuildRequest(
            self.function,
            self.binary,
            str(self.query_one("#kind", Select).value),
            self.query_one("#number", Input).value,
            self.query_one("#args", Input).value,
            self.query_one("#filter", Input).value,
            None if self.binary else self.vmlinux,
            self.query_one("#event", Input).value,
            self.query_one("#group", Input).value,
            bool(self.lab_reason),
            self.module,
        )

    def _update_number_box(self) -> None:
        takes = KINDS[str(self.query_one("#kind", Select).value)][1]
        self.query_one("#number", Input).disabled = takes is None
        self.query_one("#number-help", Static).update(takes or "")

    @on(Select.Changed, "#kind")
    def _kind_changed(self) -> None:
        self._update_number_box()
        self._recompile()

    @on(Input.Changed)
    def _input_changed(self) -> None:
        self._recompile()

    def _recompile(self, force: bool = False) -> None:
        """Compile what the form says, unless it says what was last compiled: Textual reports each
        box's first value and the kind's as changes, which would start the same compile four times."""
        request = self.request()
        if request == self._requested and not force:
            return
        self._requested = request
        self._confirmed = None
        self._sync_ticks(request.args)
        if self._place != (request.kind, request.number):
            self._place = (request.kind, request.number)
            if not self._take_opening("variables", request, self._show_variables):
                self._load_variables(request)
        if not self._take_opening("preview", request, self._show_preview):
            self._compile(request)

    def _take_opening(self, what: str, request: BuildRequest, show) -> bool:
        """Show the answer started on opening now, in the screen's first frame, when it is ready and
        the form still asks for it."""
        started = self._opening_work.get(what)
        if started is None or request != self._opening or not started.done():
            return False
        del self._opening_work[what]
        show(started.result())
        return True

    @work(exclusive=True, group="preview")
    async def _compile(self, request: BuildRequest) -> None:
        if self.preview is not None:  # the first preview, on opening, waits for nobody's typing
            await asyncio.sleep(DEBOUNCE_SECONDS)  # a newer keystroke cancels this worker here, before it compiles
        preview = await self._off_thread("preview", request, build_preview, self.events, self.readme, self.btf_path)
        self._show_preview(preview)  # not reached when cancelled meanwhile: the newer request shows instead

    async def _off_thread(self, what: str, request: BuildRequest, function, *args):
        """``function(request, *args)`` on the compile thread; the answer started on opening when the
        form still says what it said then."""
        started = self._opening_work.pop(what, None)
        if started is not None and request == self._opening:
            return await asyncio.wrap_future(started)
        return await asyncio.get_running_loop().run_in_executor(_COMPILER, function, request, *args)

    def _show_preview(self, preview: Preview) -> None:
        if not self.is_attached:  # closed while the compile ran: nothing to show it in
            return
        self.preview = preview
        self.query_one(ProbePreview).show(preview)
        if preview.probes:
            self.suggester.names = [arg.name for arg in preview.probes[0].args] + list(COMMON_FIELDS)
            self.query_one("#event", Input).placeholder = preview.probes[0].event

    def _set_status(self, text: str, kind: str = "") -> None:
        status = self.query_one("#status", Static)
        status.set_classes(kind)
        status.update(plain(text))  # names, expressions and kernel messages quoted in it

    # --- the variables tree ---------------------------------------------------------------------

    @work(exclusive=True, group="variables")
    async def _load_variables(self, request: BuildRequest) -> None:
        if self._variables_shown:  # as the preview: only a change of place typed in waits
            await asyncio.sleep(DEBOUNCE_SECONDS)
        self._show_variables(await self._off_thread("variables", request, load_variables, self.btf_path))

    def _show_variables(self, answer: tuple[list[VariableNode], str]) -> None:
        if not self.is_attached:
            return
        nodes, note = answer
        self._variables_shown = True
        tree = self.query_one(VariableTree)
        tree.set_variables(nodes)
        self._sync_ticks(self.query_one("#args", Input).value)
        note = note or ("" if nodes else "nothing in scope here: type registers in Args")
        shown = self.query_one("#tree-note", Static)
        shown.update(plain(note))
        shown.set_class(not note, "-empty")

    @on(Tree.NodeExpanded, "#variables")
    async def _expand(self, event: Tree.NodeExpanded) -> None:
        tree = self.query_one(VariableTree)
        if event.node.id in tree.loaded or event.node.data is None:
            return
        tree.loaded.add(event.node.id)
        try:
            kids = await asyncio.get_running_loop().run_in_executor(_COMPILER, children, event.node.data)
        except UserError as exc:
            self._set_status(f"{event.node.data.expression}: {exc.message}", "error")
            return
        tree.add_children(event.node, kids)

    def _sync_ticks(self, args: str) -> None:
        ticked = {}
        for word in argument_words(args):
            _, expression, type_ = expression_of(word)
            ticked[expression] = type_
        self.query_one(VariableTree).show_ticked(ticked)

    @on(VariableTree.Toggled)
    def _toggle(self, event: VariableTree.Toggled) -> None:
        if not event.node.capturable:
            self._set_status(f"{event.node.expression}: {event.node.why_not}", "warning")
            return
        args = self.query_one("#args", Input)
        words = argument_words(args.value)
        kept = [word for word in words if expression_of(word)[1] != event.node.expression]
        args.value = join_words(kept if len(kept) != len(words) else [*words, event.node.argument])

    @on(VariableTree.TypeCycled)
    def _cycle_type(self, event: VariableTree.TypeCycled) -> None:
        args = self.query_one("#args", Input)
        words = argument_words(args.value)
        for index, word in enumerate(words):
            head, expression, type_ = expression_of(word)
            if expression == event.node.expression:
                new = next_type(type_, event.step)
                words[index] = head + expression + (f":{new}" if new else "")
                break
        else:
            new = next_type(event.node.default_type, event.step)
            words.append(event.node.expression + (f":{new}" if new else ""))
        args.value = join_words(words)
        self._set_status(f"{event.node.expression}: read as {new or 'its C type'} (t: next type, T: previous)")

    def action_focus_variables(self) -> None:
        self.query_one(VariableTree).focus()

    # --- actions --------------------------------------------------------------------------------

    def action_copy(self, what: str) -> None:
        text = self.preview.copy_text(what) if self.preview is not None else ""
        if not text:
            self._set_status(f"nothing to copy for {what}: the preview has an error", "error")
            return
        self.app.copy_to_clipboard(text)
        self._set_status(f"copied the {what} command to the clipboard (OSC 52): {text.splitlines()[0]}")

    @on(Button.Pressed, "#handoff")
    def action_handoff(self) -> None:
        preview = _COMPILER.submit(build_preview, self.request(), self.events, self.readme, self.btf_path).result()
        self._show_preview(preview)
        if preview.error is not None:
            self._set_status(f"nothing to hand over: {preview.error.message}", "error")
            return
        self.app.copy_to_clipboard("\n".join(preview.admin))
        self._set_status(f"copied {len(preview.admin)} lines for an administrator: the probe (perf or by hand) "
                         "and the one-time perf group step")

    @on(Button.Pressed, "#create")
    def action_create(self) -> None:
        self._make(pin=False)

    @on(Button.Pressed, "#pin")
    def action_pin(self) -> None:
        self._make(pin=True)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(self.created)

    def _make(self, pin: bool) -> None:
        request = self.request()
        if self.events is None:
            self._set_status("no tracefs to create probes in (a snapshot is read-only)", "error")
            return
        preview = _COMPILER.submit(build_preview, request, self.events, self.readme, self.btf_path).result()
        self._show_preview(preview)
        if preview.error is not None:
            self._set_status(f"not created: {preview.error.message}", "error")
            return
        if preview.advice.needs_confirmation and self._confirmed != request:
            self._confirmed = request
            self._set_status("the feedback guard warns (see the preview): press Create again to create it anyway", "warning")
            return
        self._confirmed = None
        try:
            made = self.events.create(preview.probes, run_scoped=True)
            if pin:
                made = [self.events.pin(event) for event in made]
        except KernelRefused as exc:
            self._show_refusal(preview, exc)
            return
        except UserError as exc:
            self._set_status(str(exc), "error")
            return
        names = [event.full_name for event in made]
        self.created += names
        kept = " (kept after exit: remove with kprobe-tui del)" if pin else " (removed when kprobe-tui exits)"
        self._set_status(f"created {', '.join(names)}{kept}")
        self._recompile(force=True)  # the next Create takes the next free name
        self.post_message(self.Created(names))

    def _show_refusal(self, preview: Preview, exc: KernelRefused) -> None:
        """The kernel's error_log entry in the preview, the token its caret points at reversed."""
        log = exc.log
        mark = None
        if log is not None and log.caret >= 0:
            end = re.match(r"\S*", log.command[log.caret:]).end() + log.caret
            mark = Mark(f"kernel: {log.command} ", len("kernel: ") + log.caret, len("kernel: ") + max(end, log.caret + 1))
        message = f"the kernel refused it: {log.source}: {log.message}" if log is not None else exc.message
        self._show_preview(replace(preview, error=UserError(message, exc.hint or "see the marked token"), mark=mark))
        self._set_status(f"not created: {message}", "error")
