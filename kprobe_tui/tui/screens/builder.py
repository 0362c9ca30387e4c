"""The probe builder: one function, a kind, what to capture and a filter; what it compiles to, live.

Every change schedules a recompile in a worker (debounced, the newest request wins: work.py), so
DWARF lookups never block typing; Create and Pin make the probes in a worker too, in order. The variables at the probe point are a tree with checkboxes;
the Args input is the single truth about what is captured: ticking a node appends its expression
(``rec->name:string``) to Args, unticking removes that word, a type override (``t``) rewrites
it as ``expr:type``, and a node shows ticked exactly when its expression is a word of Args (so
typing ``sum`` ticks ``sum``). The preview shows the tracefs line(s) next to the equivalent
``perf probe`` and ``bpftrace`` commands, each copyable. Create makes the probes in the chosen
group (by default this run's, removed when the run ends); Pin moves them to the persistent group.
In lab mode (no write access to tracefs) Create becomes "Copy for admin".
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.suggester import Suggester
from textual.widgets import Button, Header, Input, Select, Static, Tree

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import capabilities, lifetime
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.probes import pipeline
from kprobe_tui.probes.capture import VariableNode, children
from kprobe_tui.probes.edit import EditTarget
from kprobe_tui.probes.form import (
    KINDS,
    BuilderKind,
    BuildRequest,
    Preview,
    build_preview,
    builder_kind,
    cycle_type,
    load_variables,
    refusal,
    ticked,
    toggle_argument,
)
from kprobe_tui.probes.spec import DEFAULT_PERSISTENT_GROUP
from kprobe_tui.stream.filterexpr import COMMON_FIELDS
from kprobe_tui.tui.navigation import Back, ShowEvents
from kprobe_tui.tui.plain import plain
from kprobe_tui.tui.theming import LAYOUT
from kprobe_tui.tui.widgets.key_footer import KeyFooter
from kprobe_tui.tui.widgets.probe_preview import ProbePreview
from kprobe_tui.tui.widgets.variable_tree import VariableTree
from kprobe_tui.tui.work import Background

if TYPE_CHECKING:
    from kprobe_tui.kernel.catalog import Catalog

DEBOUNCE_SECONDS = 0.15
WIDE_COLUMNS = 120  # from here the tree and the preview sit side by side


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

    CSS_PATH = LAYOUT
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_COLUMNS, "-wide")]
    AUTO_FOCUS = "#args"
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

    def __init__(
        self,
        function: str,
        *,
        binary: str | None = None,
        sources: KernelSources | None = None,
        line: int | None = None,
        variable: str | None = None,
        vmlinux: str | None = None,
        kind: BuilderKind = "entry",
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
        self.initial_kind: BuilderKind = "line" if line is not None else kind  # "return" from the source view's Return
        self.initial_number = str(line) if line is not None else ""
        self.initial_args = variable or ""
        self.preview: Preview | None = None
        self.created: list[str] = []
        self.replaces: DynamicEvent | None = None  # the probe an edit deletes once the new one is made
        self.suggester = FieldSuggester()
        self._confirmed: BuildRequest | None = None  # the request a guard warning was confirmed for
        self._place: tuple[str, str] | None = None  # (kind, number) the tree's variables are for
        self._variables_shown = False  # the tree has had its first variables
        self._requested: BuildRequest | None = None  # the form as last compiled
        self.initial_group = DEFAULT_PERSISTENT_GROUP if lab_reason else lifetime.run_name()
        self.work = Background(self)
        self._early: dict[str, Any] = {}  # answers to the opening work that came before the widgets
        self._open()

    def _open(self) -> None:
        """The first preview and tree need no typing: started now, they compile while Textual lays out
        the new screen's widgets instead of after it (about half the wait to the first preview).
        Answers that come first wait in ``_early`` for ``on_mount``."""
        self._opening = BuildRequest(self.function, self.binary, self.initial_kind, self.initial_number,
                                     self.initial_args, "", None if self.binary else self.vmlinux, "",
                                     self.initial_group, bool(self.lab_reason), self.module)
        # the preview first: it is what Create will write
        self.work.run("preview", build_preview, self._opening, self.probe_target,
                      then=partial(self._opened, "preview", self._show_preview))
        self.work.run("variables", load_variables, self._opening, self.probe_target.btf_path,
                      then=partial(self._opened, "variables", self._show_variables))

    def _opened(self, what: str, show, answer) -> None:
        if self.is_mounted:
            show(answer)
        else:
            self._early[what] = answer

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
        with Horizontal(classes="row"):  # after Args: Tab goes from what is captured to what is kept
            yield Static("Filter", classes="label")
            yield Input(placeholder="e.g. n > 1 (tab completes fields; our own PID is always left out)",
                        suggester=self.suggester, compact=True, id="filter")
        with Horizontal(classes="row"):
            yield Static("Event", classes="label")
            yield Input(placeholder="generated", compact=True, id="event")
            yield Static("Group", classes="label inner")
            yield Input(self.initial_group, placeholder=self.initial_group, compact=True, id="group")
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
        yield KeyFooter()

    def on_mount(self) -> None:
        self._update_number_box()
        self._recompile()

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
            builder_kind(self.query_one("#kind", Select).value),
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
        takes = KINDS[builder_kind(self.query_one("#kind", Select).value)][1]
        number = self.query_one("#number", Input)
        number.disabled = takes is None
        number.display = takes is not None  # an entry has no number: no lone box beside its kind
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
        opening = self._requested is None and request == self._opening  # started already: shown when it comes
        self._requested = request
        self._confirmed = None
        self._sync_ticks(request.args)
        if self._place != (request.kind, request.number):
            self._place = (request.kind, request.number)
            if opening:
                self._show_early("variables", self._show_variables)
            else:  # as the preview: only a change of place typed in waits
                self.work.run("variables", load_variables, request, self.probe_target.btf_path,
                              then=self._show_variables, wait=DEBOUNCE_SECONDS if self._variables_shown else 0)
        if opening:
            self._show_early("preview", self._show_preview)
        else:  # the first preview, on opening, waits for nobody's typing
            self.work.run("preview", build_preview, request, self.probe_target, then=self._show_preview,
                          wait=DEBOUNCE_SECONDS if self.preview is not None else 0)

    def _show_early(self, what: str, show) -> None:
        if what in self._early:
            show(self._early.pop(what))

    def _show_preview(self, preview: Preview) -> None:
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

    def _show_variables(self, answer: tuple[list[VariableNode], str]) -> None:
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
    def _expand(self, event: Tree.NodeExpanded) -> None:
        tree = self.query_one(VariableTree)
        node = event.node
        data = node.data
        if node.id in tree.loaded or data is None:
            return
        tree.loaded.add(node.id)
        self.work.run(f"members of {node.id}", children, data, then=partial(tree.add_children, node),
                      failed=lambda exc: self._set_status(f"{data.expression}: {exc.message}", "error"))

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
        self.set_focus(self.query_one(VariableTree))

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
        self.work.run("handoff", build_preview, self.request(), self.probe_target, then=self._hand_off)

    def _hand_off(self, preview: Preview) -> None:
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

    def action_cancel(self) -> None:
        """Escape: out of a text field first (to the first button, where letters are keys again), then back."""
        if isinstance(self.focused, Input):
            self.set_focus(self.query_one("#buttons Button", Button))
        else:
            self.post_message(Back())

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        self.post_message(Back())

    def _make(self, pin: bool) -> None:
        if self.events is None:
            self._set_status("no tracefs to create probes in (a snapshot is read-only)", "error")
            return
        request = self.request()
        self._set_status("creating…")
        # every Create answered, in order (a second press must not drop the first one's answer)
        self.work.queue("kernel", self.create_in_kernel, self.events, request, pin, self._confirmed == request,
                        then=partial(self._made, request, pin))

    def create_in_kernel(self, events: Events, request: BuildRequest, pin: bool, confirmed: bool) -> tuple[Preview, Any]:
        """In a worker: compile what the form says and make it; (preview, the events made or why not)."""
        preview = build_preview(request, self.probe_target)
        if preview.error is not None or preview.plan is None:  # a preview without an error has its plan
            return preview, None
        try:
            return preview, pipeline.create(preview.plan, events, run_scoped=True, pin=pin, confirmed=confirmed,
                                            replacing=self.replaces)
        except UserError as exc:
            return preview, exc

    def _made(self, request: BuildRequest, pin: bool, answer: tuple[Preview, Any]) -> None:
        preview, made = answer
        self._show_preview(preview)
        if preview.error is not None:
            self._set_status(f"not created: {preview.error.message}", "error")
            return
        if isinstance(made, pipeline.GuardUnconfirmed):
            self._confirmed = request
            self._set_status("the feedback guard warns (see the preview): press Create again to create it anyway", "warning")
            return
        self._confirmed = None
        if isinstance(made, UserError):
            refused = refusal(preview, made)
            if refused is None or refused.error is None:  # a refusal's preview always has its error
                self._set_status(str(made), "error")
                return
            self._show_preview(refused)
            self._set_status(f"not created: {refused.error.message}", "error")
            return
        names = [event.full_name for event in made]
        self.created += names
        kept = " (kept after exit: remove with kprobe-tui del)" if pin else " (removed when kprobe-tui exits)"
        self._set_status(f"created {', '.join(names)}{kept}")
        self._recompile(force=True)  # the next Create takes the next free name
        self.created_now(names)

    def created_now(self, names: list[str]) -> None:
        """Probes were made (not enabled: the events screen enables them in our own instance)."""
        self.post_message(ShowEvents(names))


class EditBuilder(ProbeBuilderScreen):
    """The builder prefilled from a probe; Create makes the new one, then the old one is deleted."""

    def __init__(self, replaces: DynamicEvent, target: EditTarget, **kwargs) -> None:
        super().__init__(target.function, binary=target.binary, variable=target.args, kind=target.kind, **kwargs)
        self.replaces: DynamicEvent | None = replaces
        self.target = target
        self._editing = f"editing {replaces.full_name}; not carried over: " + "; ".join(target.lost)
        self._not_deleted: UserError | None = None  # why the replaced probe stays, when it does
        if target.kind not in self.kinds:  # an fprobe where fprobes are gone: the nearest kind
            self.initial_kind = "return" if target.kind == "fprobe_exit" else "entry"
        self.initial_number = target.number

    def on_mount(self) -> None:
        self.notify(self._editing, title="Edit", timeout=10)

    def create_in_kernel(self, events: Events, request: BuildRequest, pin: bool, confirmed: bool) -> tuple[Preview, Any]:
        """The new one made, the replaced one deleted after it, in the same worker."""
        preview, made = super().create_in_kernel(events, request, pin, confirmed)
        if self.replaces is None or not isinstance(made, list):
            return preview, made
        try:
            events.delete(self.replaces)
        except UserError as exc:
            return preview, (made, exc)
        return preview, (made, None)

    def _made(self, request: BuildRequest, pin: bool, answer: tuple[Preview, Any]) -> None:
        preview, made = answer
        if not isinstance(made, tuple):
            super()._made(request, pin, answer)
            return
        made, self._not_deleted = made
        super()._made(request, pin, (preview, made))

    def created_now(self, names: list[str]) -> None:
        """The app tails the new probe after this; the replaced one went first."""
        if self.replaces is not None and self._not_deleted is None:
            self.notify(f"{self.replaces.full_name} replaced by {', '.join(names)}", title="Edited")
            self.replaces = None
        elif self.replaces is not None:
            self.notify(f"created, but the old probe stays: {self._not_deleted}", severity="error", timeout=15)
        super().created_now(names)
