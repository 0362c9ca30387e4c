"""What the probe builder would write, shown as the tools would write it: tracefs, perf, bpftrace.

The preview is data (``Preview``) made off the UI thread by the builder; this widget only renders
it, stacked (80 columns leave no room for side by side), each line labelled for a learner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from kprobe_tui.errors import UserError
from kprobe_tui.probes.guard import GuardAdvice
from kprobe_tui.probes.render import bpftrace_oneliner, perf_command
from kprobe_tui.probes.spec import CompiledProbe, ProbeSpec

LABEL_WIDTH = 9


@dataclass
class Preview:
    """A compiled request, or the error that stopped it (with the offending token in its message)."""

    spec: ProbeSpec | None = None
    probes: list[CompiledProbe] = field(default_factory=list)
    advice: GuardAdvice | None = None
    error: UserError | None = None
    tracefs_root: str = "/sys/kernel/tracing"

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) rows: per probe the tracefs write, its filter, perf and bpftrace; then notes."""
        if self.error is not None:
            rows = [("error", self.error.message)]
            return rows + ([("hint", self.error.hint)] if self.error.hint else [])
        rows: list[tuple[str, str]] = []
        for probe in self.probes:
            rows.append(("tracefs", f"echo '{probe.definition()}' >> {self.tracefs_root}/{probe.control_file}"))
            if self.spec.filter:
                rows.append(("", f"echo '{self.spec.filter}' > {self.tracefs_root}/events/{probe.group}/{probe.event}/filter"))
            rows.append(("perf", perf_command(self.spec, probe.group, probe.event)))
            rows.append(("bpftrace", bpftrace_oneliner(self.spec, probe)))
            rows += [("note", note) for note in probe.notes]
        for warning in self.advice.warnings if self.advice else ():
            rows.append(("warning", warning))
        return rows


class ProbePreview(Static):
    """Labelled rows, wrapped beside their label; errors in the error colour, warnings in the warning colour."""

    DEFAULT_CSS = """
    ProbePreview { padding: 0 1; }
    """
    _STYLES = {"error": "bold red", "hint": "yellow", "warning": "bold yellow", "note": "dim"}

    def __init__(self, **kwargs) -> None:
        super().__init__("compiling…", **kwargs)
        self.preview: Preview | None = None

    def show(self, preview: Preview) -> None:
        self.preview = preview
        table = Table.grid(padding=(0, 1))
        table.add_column(width=LABEL_WIDTH - 1, no_wrap=True)
        table.add_column(ratio=1, overflow="fold")
        for label, line in preview.lines():
            style = self._STYLES.get(label, "")
            table.add_row(Text(label, style=f"bold {style}".strip()),
                          Text(line, style=style if label in ("error", "warning") else ""))
        self.update(table)
