"""What the probe builder would write, shown as the tools would write it: tracefs, perf, bpftrace.

The preview is data (``probes.form.Preview``) made off the UI thread by the pipeline; this widget
only renders it, each line labelled for a learner. ``compact`` (80 columns) keeps each command to one line,
cut with an ellipsis: the copy keys copy it whole. An error shows the text it came from with the
offending token in reverse video.
"""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from kprobe_tui.probes.form import Preview
from kprobe_tui.textsafe import printable

LABEL_WIDTH = 9
COPYABLE = ("tracefs", "perf", "bpftrace")  # row labels whose text the copy keys take


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
