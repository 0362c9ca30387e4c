"""The probe builder: one function, a kind, arguments and a filter; what it compiles to, live.

Every keystroke schedules a recompile off the UI thread (debounced, the newest request wins),
so DWARF lookups never block typing. The preview shows the tracefs line(s) next to the equivalent
``perf probe`` and ``bpftrace`` commands. Create makes the probes in this run's group (removed
when the run ends); the app then tails them in its own instance. Pin moves them to the
persistent group, where they stay.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Select, Static

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import capabilities, lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.probes import guard
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.tui.widgets.probe_preview import Preview, ProbePreview

DEBOUNCE_SECONDS = 0.15

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
        try:
            return [self.place(), *shlex.split(self.args)]
        except ValueError as exc:  # an unclosed quote
            raise UserError(f"{self.args.strip()!r}: {exc}", "close the quote, or drop it") from None


def build_preview(request: BuildRequest, events: Events | None, readme: str, btf_path: str | None) -> Preview:
    """Parse, guard and compile a request into this run's group; any UserError becomes the preview."""
    root = str(events.tracefs.root) if events is not None else "/sys/kernel/tracing"
    try:
        group = lifetime.run_name()
        spec = parse_spec(request.words(), binary=request.binary, fprobe=request.kind.startswith("fprobe"), group=group)
        advice = guard.advise(spec)  # our own PID: showing its events must not cause more of them
        spec = replace(spec, filter=guard.combine_filters(request.filter.strip(), advice.filter))
        taken = [e.event for e in events.events_in(group)] if events is not None else []
        probes = compile_spec(spec, group, taken, readme=readme, vmlinux=request.vmlinux, btf_path=btf_path)
    except UserError as exc:
        return Preview(error=exc, tracefs_root=root)
    return Preview(spec, probes, advice, tracefs_root=root)


class ProbeBuilderScreen(Screen):
    """Build a probe on ``function`` (of ``binary`` with -x, else the kernel)."""

    DEFAULT_CSS = """
    ProbeBuilderScreen #target {
        height: 1; margin-bottom: 1; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis;
    }
    ProbeBuilderScreen .row { height: 1; }
    ProbeBuilderScreen .label { width: 9; padding: 0 0 0 1; color: $accent; }
    ProbeBuilderScreen #kind { width: 16; }
    ProbeBuilderScreen #number { width: 12; margin-left: 1; }
    ProbeBuilderScreen #number-help { width: 1fr; padding: 0 1; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    ProbeBuilderScreen Input { width: 1fr; }
    ProbeBuilderScreen #preview-box { height: 1fr; margin-top: 1; border-top: solid $primary 40%; }
    ProbeBuilderScreen #status { height: auto; max-height: 3; padding: 0 1; }
    ProbeBuilderScreen #status.error { color: $error; }
    ProbeBuilderScreen #status.warning { color: $warning; }
    ProbeBuilderScreen #buttons { height: 1; }
    ProbeBuilderScreen #buttons Button { margin-right: 2; }
    """
    BINDINGS = [
        Binding("ctrl+s", "create", "Create"),
        Binding("ctrl+g", "pin", "Pin (keep)"),
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
    ) -> None:
        """``line`` and ``variable`` prefill a line probe capturing that variable (from a source view);
        ``vmlinux`` is the kernel's debug info, for C-level probes in kernel functions."""
        super().__init__()
        self.function = function
        self.vmlinux = vmlinux
        self.binary = os.path.abspath(binary) if binary else None
        self.tracefs = sources.tracing() if sources is not None and sources.tracefs is not None else None
        self.events = Events(self.tracefs) if self.tracefs is not None else None
        self.readme = self.tracefs.read("README") if self.tracefs is not None and self.tracefs.exists("README") else ""
        self.btf_path = str(sources.btf_vmlinux) if sources is not None and not self.binary else None
        fprobe = not self.binary and sources is not None and capabilities.detect(sources).has("fprobe")
        self.kinds = [k for k in KINDS if not k.startswith("fprobe") or fprobe]
        self.initial_kind = "line" if line is not None else "entry"
        self.initial_number = str(line) if line is not None else ""
        self.initial_args = variable or ""
        self.preview: Preview | None = None
        self.created: list[str] = []
        self._confirmed: BuildRequest | None = None  # the request a guard warning was confirmed for

    def compose(self) -> ComposeResult:
        yield Header()
        where = f"uprobe  {self.binary} : {self.function}" if self.binary else f"kernel  {self.function}"
        yield Static(Text(where, style="bold"), id="target")
        with Horizontal(classes="row"):
            yield Static("Kind", classes="label")
            yield Select([(KINDS[k][0], k) for k in self.kinds], value=self.initial_kind, allow_blank=False,
                         compact=True, id="kind")
            yield Input(self.initial_number, placeholder="N", compact=True, id="number")
            yield Static("", id="number-help")
        with Horizontal(classes="row"):
            yield Static("Args", classes="label")
            yield Input(self.initial_args, placeholder="var ptr->member name:string $params $retval %di",
                        compact=True, id="args")
        with Horizontal(classes="row"):
            yield Static("Filter", classes="label")
            yield Input(placeholder="e.g. len > 100 (our own PID is always left out)", compact=True, id="filter")
        with VerticalScroll(id="preview-box"):
            yield ProbePreview(id="preview")
        yield Static("", id="status")
        with Horizontal(id="buttons"):
            yield Button("Create", id="create", variant="primary", compact=True)
            yield Button("Pin", id="pin", compact=True, tooltip="create and keep after kprobe-tui exits (until kprobe-tui del)")
            yield Button("Cancel", id="cancel", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self._update_number_box()
        self.query_one("#args", Input).focus()
        self._recompile()

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

    def _recompile(self) -> None:
        self._confirmed = None
        self._compile(self.request())

    @work(exclusive=True, group="preview")
    async def _compile(self, request: BuildRequest) -> None:
        await asyncio.sleep(DEBOUNCE_SECONDS)  # a newer keystroke cancels this worker here, before it compiles
        preview = await asyncio.get_running_loop().run_in_executor(
            _COMPILER, build_preview, request, self.events, self.readme, self.btf_path)
        self._show_preview(preview)  # not reached when cancelled meanwhile: the newer request shows instead

    def _show_preview(self, preview: Preview) -> None:
        if not self.is_attached:  # closed while the compile ran: nothing to show it in
            return
        self.preview = preview
        self.query_one(ProbePreview).show(preview)

    def _set_status(self, text: str, kind: str = "") -> None:
        status = self.query_one("#status", Static)
        status.set_classes(kind)
        status.update(Text(text))

    # --- actions --------------------------------------------------------------------------------

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
        except UserError as exc:
            self._set_status(str(exc), "error")
            return
        names = [event.full_name for event in made]
        self.created += names
        kept = " (kept after exit: remove with kprobe-tui del)" if pin else " (removed when kprobe-tui exits)"
        self._set_status(f"created {', '.join(names)}{kept}")
        self._recompile()  # the next Create takes the next free name
        self.post_message(self.Created(names))
