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
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

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
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.probes import pipeline
from kprobe_tui.probes.capture import VariableNode, children
from kprobe_tui.probes.form import (
    KINDS,
    BuildRequest,
    Preview,
    build_preview,
    cycle_type,
    load_variables,
    refusal,
    ticked,
    toggle_argument,
)
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP
from kprobe_tui.stream.filterexpr import COMMON_FIELDS
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.widgets.probe_preview import ProbePreview
from kprobe_tui.tui.widgets.variable_tree import VariableTree

if TYPE_CHECKING:
    from kprobe_tui.kernel.catalog import Catalog

DEBOUNCE_SECONDS = 0.15
WIDE_COLUMNS = 120  # from here the tree and the preview sit side by side

# Every compile runs on this one thread: pyelftools reads through shared stream positions, so
# two DWARF questions about one file must never run at once.
_COMPILER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kprobe-tui-compile")


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
        catalog: Catalog | None = None,
    ) -> None:
        """``line`` and ``variable`` prefill a line probe capturing that variable (from a source view);
        ``vmlinux`` is the kernel's debug info, for C-level probes in kernel functions; ``lab_reason``
        (why this user cannot write tracefs) turns Create into a hand-off to an administrator; ``module``:
        the kernel module the function is in (its debug info, and probes placed as MODULE:func); ``catalog``:
        the kernel's functions, which refuse unknown and blacklisted ones (made from ``sources`` if not given)."""
        super().__init__()
        self.function = function
        self.vmlinux = vmlinux
        self.module = module or None
        self.lab_reason = lab_reason
        self.binary = os.path.abspath(binary) if binary else None  # resolved and checked by parse_spec
        self.probe_target = pipeline.ProbeTarget.of(sources, catalog=catalog, kernel=not self.binary)
        self.events = self.probe_target.events
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
            "preview": _COMPILER.submit(build_preview, self._opening, self.probe_target),
            "variables": _COMPILER.submit(load_variables, self._opening, self.probe_target.btf_path),
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
        preview = await self._off_thread("preview", request, build_preview, self.probe_target)
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
        self._show_variables(await self._off_thread("variables", request, load_variables, self.probe_target.btf_path))

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
        self.query_one(VariableTree).show_ticked(ticked(args))

    @on(VariableTree.Toggled)
    def _toggle(self, event: VariableTree.Toggled) -> None:
        if not event.node.capturable:
            self._set_status(f"{event.node.expression}: {event.node.why_not}", "warning")
            return
        args = self.query_one("#args", Input)
        args.value = toggle_argument(args.value, event.node)

    @on(VariableTree.TypeCycled)
    def _cycle_type(self, event: VariableTree.TypeCycled) -> None:
        args = self.query_one("#args", Input)
        args.value, new = cycle_type(args.value, event.node, event.step)
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
        preview = _COMPILER.submit(build_preview, self.request(), self.probe_target).result()
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
        preview = _COMPILER.submit(build_preview, request, self.probe_target).result()
        self._show_preview(preview)
        if preview.error is not None:
            self._set_status(f"not created: {preview.error.message}", "error")
            return
        try:
            made = pipeline.create(preview.plan, self.events, run_scoped=True, pin=pin,
                                   confirmed=self._confirmed == request)
        except pipeline.GuardUnconfirmed:
            self._confirmed = request
            self._set_status("the feedback guard warns (see the preview): press Create again to create it anyway", "warning")
            return
        except UserError as exc:
            self._confirmed = None
            refused = refusal(preview, exc)
            if refused is None:
                self._set_status(str(exc), "error")
                return
            self._show_preview(refused)
            self._set_status(f"not created: {refused.error.message}", "error")
            return
        self._confirmed = None
        names = [event.full_name for event in made]
        self.created += names
        kept = " (kept after exit: remove with kprobe-tui del)" if pin else " (removed when kprobe-tui exits)"
        self._set_status(f"created {', '.join(names)}{kept}")
        self._recompile(force=True)  # the next Create takes the next free name
        self.post_message(self.Created(names))
