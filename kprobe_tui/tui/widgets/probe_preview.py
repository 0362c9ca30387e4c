"""What the probe builder would write, shown as the tools would write it: tracefs, perf, bpftrace.

The preview is data (``probes.form.Preview``) made off the UI thread by the pipeline; this widget
only renders it, each line labelled for a learner. A command longer than the width wraps, never cut (the
box scrolls): at 80 columns a learner reads the whole tracefs line, and the copy keys copy it as shown.
An error shows the text it came from with the offending token in reverse video.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from kprobe_tui.probes.form import Preview
from kprobe_tui.textsafe import printable

LABEL_WIDTH = 9
STYLED = ("error", "hint", "warning", "note", "admin")  # row labels with a colour of their own


class ProbePreview(Static):
    """Labelled rows beside their label; errors in the error colour, the offending token reversed
    (the colours are the theme's: component classes, in themes/default.tcss)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {f"probe-preview--{kind}" for kind in (*STYLED, "mark")}

    def __init__(self, **kwargs) -> None:
        super().__init__("compiling…", **kwargs)
        self.preview: Preview | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        if self.preview is not None:  # another theme: the rows again, in its colours
            self.show(self.preview)

    def _style(self, kind: str) -> Style:
        return self.get_component_rich_style(f"probe-preview--{kind}", partial=True)

    def show(self, preview: Preview) -> None:
        self.preview = preview
        table = Table.grid(padding=(0, 1))
        table.add_column(width=LABEL_WIDTH - 1, no_wrap=True)
        table.add_column(ratio=1, overflow="fold")
        for label, line in preview.lines():
            style = self._style(label) if label in STYLED else Style()
            text = Text(style=style if label in ("error", "warning", "admin") else "")
            if label == "at" and preview.mark is not None:  # the marked token, each side escaped on its own
                start, end = preview.mark.start, max(preview.mark.end, preview.mark.start + 1)
                text.append(printable(line[:start]))
                text.append(printable(line[start:end]), style=self._style("mark"))
                text.append(printable(line[end:]))
            else:  # paths, symbol names, typed text and kernel messages: data, escaped
                text.append(printable(line))
            table.add_row(Text(label, style=Style(bold=True) + style), text)
        self.update(table)
