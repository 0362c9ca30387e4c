"""The variables at a probe point as a tree with checkboxes: tick what to capture.

The tree only shows and asks: ticking and type changes go up as messages, and the screen says
which expressions are ticked (with their types) by calling ``show_ticked``. Members are loaded
when a node is first expanded (``NodeExpanded`` goes up; the screen calls ``add_children``).
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from kprobe_tui.probes.capture import VariableNode
from kprobe_tui.textsafe import printable

TICKED, UNTICKED, REFUSED = "[x] ", "[ ] ", " -  "
TOGGLE = Style.from_meta({"toggle": True})  # what Tree's click handler reads to expand instead of select
MAX_NAME, MAX_TYPE = 20, 24  # column widths beyond which a long name or type just pushes the rest right


class VariableTree(Tree[VariableNode]):
    """Variables and their members; a row's label starts with its name (then type, where, read as)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "select_cursor", "Tick", show=False),
        Binding("right", "expand", "Expand", show=False),
        Binding("left", "collapse", "Collapse", show=False),
        Binding("t", "cycle_type(1)", "Type"),
        Binding("T", "cycle_type(-1)", "Type back", show=False),
    ]

    class Toggled(Message):
        """Tick or untick ``node`` (enter, space or a click on its row); the screen says why not when it cannot."""

        def __init__(self, node: VariableNode) -> None:
            super().__init__()
            self.node = node

    class TypeCycled(Message):
        """Give ``node`` the next (``step`` 1) or previous (-1) type override."""

        def __init__(self, node: VariableNode, step: int) -> None:
            super().__init__()
            self.node = node
            self.step = step

    def __init__(self, **kwargs) -> None:
        super().__init__("variables", **kwargs)
        self.show_root = False
        self.auto_expand = False
        self.guide_depth = 2
        self.ticked: dict[str, str | None] = {}  # expression -> type override
        self.loaded: set[int] = set()  # tree node ids whose members are in
        self.widths: dict[int, tuple[int, int]] = {}  # per parent: its children's name and type columns

    def set_variables(self, nodes: list[VariableNode]) -> None:
        self.clear()
        self.loaded.clear()
        self.widths.clear()
        self.add_children(self.root, nodes)
        self.cursor_line = 0

    def add_children(self, parent: TreeNode[VariableNode], nodes: list[VariableNode]) -> None:
        self.widths[parent.id] = (max((len(printable(n.name)) for n in nodes), default=0),
                                  max((len(printable(n.type_name)) for n in nodes), default=0))
        for node in nodes:
            parent.add(self._label(node, self.widths[parent.id]), node, allow_expand=node.expandable)
        self.loaded.add(parent.id)

    def show_ticked(self, ticked: dict[str, str | None]) -> None:
        """Which expressions the arguments hold now, with their :TYPE (None: the compiler's)."""
        if ticked != self.ticked:
            self.ticked = ticked
            self._refresh_labels(self.root)

    def _refresh_labels(self, parent: TreeNode[VariableNode]) -> None:
        for child in parent.children:
            if child.data is not None:  # always (add_children gives each its VariableNode): this says so to mypy
                child.set_label(self._label(child.data, self.widths[parent.id]))
            self._refresh_labels(child)

    def _label(self, node: VariableNode, widths: tuple[int, int]) -> Text:
        """Name, C type, where, and what it is read as, in columns shared with its siblings."""
        ticked = node.expression in self.ticked
        reads_as = self.ticked.get(node.expression) or node.default_type or node.reads_as
        # names and types are the debug info's (or BTF's): shown escaped
        name = printable(node.name).ljust(min(widths[0], MAX_NAME))
        type_name = printable(node.type_name).ljust(min(widths[1], MAX_TYPE))
        label = Text.assemble((name, "bold"), "  ", (type_name, "italic"), "  ", (printable(node.where), "dim"))
        if node.capturable and reads_as:
            label.append(f"  as {printable(reads_as)}", style="bold" if ticked and self.ticked.get(node.expression) else "")
        if not node.capturable and node.why_not:
            label.append(f"  ({printable(node.why_not)})", style="dim")
        return label

    def render_label(self, node: TreeNode[VariableNode], base_style: Style, style: Style) -> Text:
        """The checkbox first, then the expand arrow (or its width in blanks), then the label."""
        label = node._label.copy()  # as Tree.render_label does: a Text (the public label is typed str | Text)
        label.stylize(style)
        if node.data is None:
            return label
        data = node.data
        box = REFUSED if not data.capturable else TICKED if data.expression in self.ticked else UNTICKED
        arrow = (self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE) if node.allow_expand else "  "
        return Text.assemble((box, base_style), (arrow, base_style + TOGGLE), label)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        event.stop()
        if event.node.data is not None:
            self.post_message(self.Toggled(event.node.data))

    def action_expand(self) -> None:
        if self.cursor_node is not None and self.cursor_node.allow_expand:
            self.cursor_node.expand()

    def action_collapse(self) -> None:
        node = self.cursor_node
        if node is None:
            return
        if node.allow_expand and node.is_expanded:
            node.collapse()
        elif node.parent is not None and node.parent is not self.root:
            self.move_cursor(node.parent)

    def action_cycle_type(self, step: int) -> None:
        if self.cursor_node is not None and self.cursor_node.data is not None and self.cursor_node.data.capturable:
            self.post_message(self.TypeCycled(self.cursor_node.data, step))
