"""What the probe builder would write, shown as the tools would write it: tracefs, perf, bpftrace.

The preview is data (``Preview``) made off the UI thread by the builder; this widget only renders
it, each line labelled for a learner. ``compact`` (80 columns) keeps each command to one line,
cut with an ellipsis: the copy keys copy it whole. An error shows the text it came from with the
offending token in reverse video.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from kprobe_tui.errors import UserError
from kprobe_tui.probes.guard import GuardAdvice
from kprobe_tui.probes.render import bpftrace_oneliner, perf_command, tracefs_commands
from kprobe_tui.probes.spec import CompiledProbe, ProbeSpec
from kprobe_tui.textsafe import printable

LABEL_WIDTH = 9
COPYABLE = ("tracefs", "perf", "bpftrace")  # row labels whose text the copy keys take


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

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) rows: per probe the tracefs write, its filter, perf and bpftrace; then notes."""
        if self.error is not None:
            rows = [("error", self.error.message)]
            rows += [("at", self.mark.text)] if self.mark is not None else []
            return rows + ([("hint", self.error.hint)] if self.error.hint else [])
        rows: list[tuple[str, str]] = []
        for probe in self.probes:
            rows += zip(("tracefs", ""), tracefs_commands(probe, self.spec.filter, self.tracefs_root))
            rows.append(("perf", perf_command(self.spec, probe.group, probe.event)))
            rows.append(("bpftrace", bpftrace_oneliner(self.spec, probe)))
            rows += [("note", note) for note in probe.notes]
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


class ProbePreview(Static):
    """Labelled rows beside their label; errors in the error colour, the offending token reversed."""

    DEFAULT_CSS = """
    ProbePreview { padding: 0 1; }
    """
    _STYLES: ClassVar[dict[str, str]] = {"error": "bold red", "hint": "yellow", "warning": "bold yellow", "note": "dim", "admin": "cyan"}

    def __init__(self, **kwargs) -> None:
        super().__init__("compiling…", **kwargs)
        self.preview: Preview | None = None
        self.compact = False

    def set_compact(self, compact: bool) -> None:
        """One line per command (cut to the width, so re-cut on every resize) or wrapped whole."""
        self.compact = compact
        if self.preview is not None:
            self.show(self.preview)

    def show(self, preview: Preview) -> None:
        self.preview = preview
        table = Table.grid(padding=(0, 1))
        table.add_column(width=LABEL_WIDTH - 1, no_wrap=True)
        table.add_column(ratio=1, overflow="fold")
        for label, line in preview.lines():
            style = self._STYLES.get(label, "")
            text = Text(style=style if label in ("error", "warning", "admin") else "")
            if label == "at" and preview.mark is not None:  # the marked token, each side escaped on its own
                start, end = preview.mark.start, max(preview.mark.end, preview.mark.start + 1)
                text.append(printable(line[:start]))
                text.append(printable(line[start:end]), style="reverse bold red")
                text.append(printable(line[end:]))
            else:  # paths, symbol names, typed text and kernel messages: data, escaped
                text.append(printable(line))
            if self.compact and label in (*COPYABLE, ""):
                text.truncate(max(self.content_size.width - LABEL_WIDTH, 20), overflow="ellipsis")
            table.add_row(Text(label, style=f"bold {style}".strip()), text)
        self.update(table)
