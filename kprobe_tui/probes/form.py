"""The probe builder's form as data: what it asks the pipeline, and what it shows back.

A ``BuildRequest`` is the builder's boxes (kind, line or offset, Args, Event, Group, Filter);
``build_preview`` runs it through the same pipeline as ``kprobe-tui probe`` and returns a
``Preview``: the probes and the commands that make them, or the error with the offending token
located in the box it was typed in (``Mark``). The Args box is the single truth about what is
captured: ``toggle_argument`` and ``cycle_type`` rewrite it the way ticking a variable or
pressing ``t`` does. All of it runs off the UI thread; the screen only renders.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Literal

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import KernelRefused
from kprobe_tui.probes import pipeline
from kprobe_tui.probes.capture import VariableNode, btf_variables, dwarf_variables, next_type, retval_node
from kprobe_tui.probes.guard import GuardAdvice
from kprobe_tui.probes.render import admin_handoff, by_event, command_rows
from kprobe_tui.probes.spec import CompiledProbe, ProbeSpec, check_text, parse_spec
from kprobe_tui.stream import filterexpr

# The builder's kinds: the probe kinds, with an fprobe's exit spelled as a kind of its own.
BuilderKind = Literal["entry", "return", "line", "offset", "fprobe", "fprobe_exit"]
KINDS: dict[BuilderKind, tuple[str, str | None]] = {  # kind -> (label, what the number box takes, or None)
    "entry": ("entry", None),
    "return": ("return", None),
    "line": ("line", "line, from the function's first"),
    "offset": ("offset", "+bytes into the function"),
    "fprobe": ("fprobe", None),
    "fprobe_exit": ("fprobe exit", None),
}
_NAME_PREFIX = re.compile(r"^[A-Za-z_]\w*=")


def builder_kind(value: object) -> BuilderKind:
    """``value`` (what the kind select holds) as one of ``KINDS``; anything else is a bug, not input."""
    for kind in KINDS:
        if kind == value:
            return kind
    raise ValueError(f"not a builder kind: {value!r}")


@dataclass(frozen=True)
class BuildRequest:
    """What the form says; compiled off the UI thread."""

    function: str
    binary: str | None
    kind: BuilderKind
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

    def probe_request(self) -> pipeline.ProbeRequest:
        """The pipeline's request: in this run's group unless another is typed, our own PID filtered out
        (we show the events), except in lab mode, where nothing is shown here and the group is persistent."""
        return pipeline.ProbeRequest(
            tuple(self.words()), binary=self.binary, module=self.module, vmlinux=self.vmlinux,
            fprobe=self.kind.startswith("fprobe"), group=self.group.strip() or None,
            run_group=None if self.lab else lifetime.run_name(), event=self.event.strip() or None,
            filter=self.filter if self.filter.strip() else None, displayed=not self.lab,
        )


@dataclass(frozen=True)
class Mark:
    """Where an error points: ``text`` as the user (or the kernel) sees it, ``start:end`` the token."""

    text: str
    start: int
    end: int


@dataclass
class Preview:
    """A compiled request, or the error that stopped it (with the offending token marked)."""

    spec: ProbeSpec | None = None
    probes: list[CompiledProbe] = field(default_factory=list)
    advice: GuardAdvice | None = None
    error: UserError | None = None
    tracefs_root: str = "/sys/kernel/tracing"
    mark: Mark | None = None
    admin: list[str] = field(default_factory=list)  # lab mode: what to hand to an administrator
    plan: pipeline.Plan | None = None  # what Create makes

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) rows: per probe the tracefs write, its filter, perf and bpftrace; then notes."""
        rows: list[tuple[str, str]] = []
        if self.error is not None:
            rows.append(("error", self.error.message))
            rows += [("at", self.mark.text)] if self.mark is not None else []
            return rows + ([("hint", self.error.hint)] if self.error.hint else [])
        assert self.spec is not None  # a preview without an error has its spec
        # first: at 80x24 the box shows its first lines, and this is what to know before Create
        rows += [("note", note) for note in shared_event_notes(self.spec, self.probes)]
        for same in by_event(self.probes):
            rows += command_rows(self.spec, same, self.tracefs_root)
            rows += [("note", note) for note in dict.fromkeys(note for probe in same for note in probe.notes)]
        for warning in self.advice.warnings if self.advice else ():
            rows.append(("warning", warning))
        rows += [("admin", line) for line in self.admin]
        return rows

    def copy_text(self, what: str) -> str:
        """The whole text of one tool's rows (``tracefs`` includes its filter line), for the clipboard."""
        taken, current = [], ""
        for label, text in self.lines():
            current = label or current
            if current == what:
                taken.append(text)
        return "\n".join(taken)


def shared_event_notes(spec: ProbeSpec, probes: list[CompiledProbe]) -> list[str]:
    """Say, before Create, where one place is several addresses, why, and that it stays one probe."""
    notes = []
    for same in by_event(probes):
        if len(same) < 2:
            continue
        first, event = same[0], same[0].event
        offsets = ", ".join([f"{first.function}+{first.function_offset}", *(f"+{p.function_offset}" for p in same[1:])])
        notes.append(f"{spec.place_text()} is {len(same)} addresses ({offsets}): the compiler split it (a loop's "
                     f"start, test and step; inlined or moved code). One event, {event}, fires at each: the events "
                     f"table and the count name it {spec.place_text()}, each event's detail the address that fired")
    return notes


def build_preview(request: BuildRequest, target: pipeline.ProbeTarget) -> Preview:
    """Parse, guard and compile a request; any UserError becomes the preview, its token marked."""
    root = target.tracefs_root
    try:
        planned = pipeline.plan(request.probe_request(), target)
    except UserError as exc:
        mark = error_mark(exc, request)
        if isinstance(exc, filterexpr.FilterError):  # its own caret drawing is replaced by the marked token
            exc = UserError(f"filter error at column {exc.position + 1}: {exc.problem}", exc.hint)
        return Preview(error=exc, tracefs_root=root, mark=mark)
    admin = admin_handoff(planned.spec, planned.probes, _login_name(), root) if request.lab else []
    return Preview(planned.spec, planned.probes, planned.advice, tracefs_root=root, admin=admin, plan=planned)


def refusal(preview: Preview, exc: UserError) -> Preview | None:
    """The preview showing why the kernel refused to create it (its error_log entry, the token its caret
    points at marked); None when ``exc`` is not the kernel's refusal."""
    if not isinstance(exc, KernelRefused):
        return None
    log = exc.log
    mark = _word_mark("kernel", log.command, log.caret) if log is not None and log.caret >= 0 else None
    message = f"the kernel refused it: {log.source}: {log.message}" if log is not None else exc.message
    return replace(preview, error=UserError(message, exc.hint or "see the marked token"), mark=mark)


def _login_name() -> str:
    """This user's account name from the password database (not $USER: the environment is the user's to set)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def error_mark(exc: UserError, request: BuildRequest) -> Mark | None:
    """The token an error is about, in the box it was typed in: the longest word the message names."""
    if isinstance(exc, (filterexpr.FilterError, filterexpr.FilterFieldError)):
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
    word = re.match(r"\S*", text[position:])
    assert word is not None  # \S* matches everywhere, if only the empty string
    end = word.end() + position
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


# --- the Args box: the single truth about what is captured ----------------------------------------


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


def ticked(args: str) -> dict[str, str | None]:
    """expression -> its :TYPE (or None) for each word of Args: what the tree shows ticked."""
    found: dict[str, str | None] = {}
    for word in argument_words(args):
        _, expression, type_ = expression_of(word)
        found[expression] = type_
    return found


def toggle_argument(args: str, node: VariableNode) -> str:
    """Args with ``node``'s expression removed when there, else appended (with its default type)."""
    words = argument_words(args)
    kept = [word for word in words if expression_of(word)[1] != node.expression]
    return join_words(kept if len(kept) != len(words) else [*words, node.argument])


def cycle_type(args: str, node: VariableNode, step: int) -> tuple[str, str | None]:
    """Args with ``node``'s type moved ``step`` along the choices (added when not there yet), and the new type."""
    words = argument_words(args)
    for index, word in enumerate(words):
        head, expression, type_ = expression_of(word)
        if expression == node.expression:
            new = next_type(type_, step)
            words[index] = head + expression + (f":{new}" if new else "")
            break
    else:
        new = next_type(node.default_type, step)
        words.append(node.expression + (f":{new}" if new else ""))
    return join_words(words), new
