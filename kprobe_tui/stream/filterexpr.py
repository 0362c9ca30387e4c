"""The event filter language: parse, evaluate on events, and push down to the kernel.

    comm == "sshd" && len > 100 || event ~ "tcp_*"

Fields are the event header (time, cpu, comm, pid, tgid, flags, event, site) and the probe's
arguments by name; ``ntohs(FIELD)`` and ``ntohl(FIELD)`` read a 16- or 32-bit field in network
byte order (a port, an address). Operators: ``== != < <= > >=`` and ``~`` (glob), joined by
``&& || !`` and parentheses; values are numbers (decimal or 0x hex, may be negative) or quoted
strings. The same expression is offered to each tailed event's ``filter`` file when the kernel's
own filter language can say it for that event, so unwanted events are dropped before they are
copied to us: ``ntohs(dport) == 53`` goes down as ``dport == 13568``, the constant swapped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from kprobe_tui.errors import UserError
from kprobe_tui.stream.parser import FAULT, HEADER_FIELDS, Event

COMPARATORS = ("==", "!=", "<=", ">=", "<", ">", "~")
TOKEN = re.compile(
    r"""\s*(?:(?P<op>&&|\|\||==|!=|<=|>=|<|>|~|!|\(|\))|(?P<num>-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?))(?![\w.])"""
    r"""|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<name>[A-Za-z_][\w.]*))"""
)
# Header fields the kernel filter knows under another name; the rest exist only in our view.
KERNEL_HEADER = {"pid": "common_pid", "comm": "comm", "cpu": "CPU"}
# The tree is walked recursively (push-down, evaluation), a chain of && as deep as it is long:
# bounded well inside Python's 1000 frames. A kernel filter file takes 4095 bytes, ~400 terms.
MAX_COMPARISONS = 200
MAX_NESTING = 32

# Network-to-host byte order conversions a field may be wrapped in, and the width each swaps.
BYTE_ORDER_BITS = {"ntohs": 16, "ntohl": 32}


def swap_bytes(value: int, transform: str) -> int:
    """``ntohs``/``ntohl`` of a value as x86 reads it: the low 16 or 32 bits, bytes reversed."""
    width = BYTE_ORDER_BITS[transform] // 8
    return int.from_bytes((value & ((1 << (width * 8)) - 1)).to_bytes(width, "little"), "big")


def split_transform(text: str) -> tuple[str, str | None]:
    """``ntohs(dport)`` -> ("dport", "ntohs"); a bare name -> (name, None)."""
    match = re.fullmatch(r"\s*(ntohs|ntohl)\(\s*([^()\s]+)\s*\)\s*", text)
    return (match[2], match[1]) if match else (text.strip(), None)


class FilterError(UserError):
    """A filter that does not parse; ``position`` is the offending column in ``text``."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        self.text, self.position, self.problem = text, position, problem
        super().__init__(f"filter error at column {position + 1}: {problem}\n  {text}\n  {' ' * position}^",
                         'example: comm == "sshd" && len > 100 || event ~ "tcp_*"')


@dataclass(frozen=True)
class Compare:
    field: str
    op: str
    value: int | float | str
    position: int
    transform: str | None = None  # "ntohs"/"ntohl": the field is compared byte-swapped


@dataclass(frozen=True)
class BoolOp:
    op: str  # "&&" or "||"
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Const:
    value: bool


Node = Compare | BoolOp | Not | Const


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, object, int]] = []
        pos = 0
        while pos < len(text):
            m = TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                at = pos + (len(text[pos:]) - len(text[pos:].lstrip()))
                raise FilterError(text, at, f"unexpected {text[at]!r}")
            kind = m.lastgroup
            assert kind is not None  # every alternative of the token pattern is a named group
            start, raw = m.start(kind), m.group(kind)
            if kind == "num":
                try:
                    value: object = float(raw) if "." in raw else int(raw, 0)
                except ValueError:  # 09: Python (and the kernel's kstrtoll) read a leading 0 as octal
                    raise FilterError(text, start, f"{raw!r} is not a number (no leading zeros; 0x for hex)") from None
            elif kind == "str":
                value = re.sub(r"\\(.)", r"\1", raw[1:-1])
            else:
                value = raw
            self.tokens.append((kind, value, start))
            pos = m.end()
        self.index = 0
        self.depth = 0
        comparisons = [position for kind, value, position in self.tokens if kind == "op" and value in COMPARATORS]
        if len(comparisons) > MAX_COMPARISONS:
            raise FilterError(text, comparisons[MAX_COMPARISONS], f"{len(comparisons)} comparisons: at most "
                              f"{MAX_COMPARISONS} in one filter")

    def peek(self) -> tuple[str, object, int]:
        return self.tokens[self.index] if self.index < len(self.tokens) else ("end", None, len(self.text))

    def take(self) -> tuple[str, object, int]:
        token = self.peek()
        self.index += 1
        return token

    def parse(self) -> Node:
        if not self.tokens:
            raise FilterError(self.text, 0, "empty filter")
        node = self.parse_or()
        kind, value, pos = self.peek()
        if kind != "end":
            raise FilterError(self.text, pos, f"expected && or || before {value!r}")
        return node

    def parse_or(self) -> Node:
        node = self.parse_and()
        while self.peek()[:2] == ("op", "||"):
            self.take()
            node = BoolOp("||", node, self.parse_and())
        return node

    def parse_and(self) -> Node:
        node = self.parse_unary()
        while self.peek()[:2] == ("op", "&&"):
            self.take()
            node = BoolOp("&&", node, self.parse_unary())
        return node

    def parse_unary(self) -> Node:
        kind, value, pos = self.take()
        if (kind, value) in (("op", "!"), ("op", "(")):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise FilterError(self.text, pos, f"nested more than {MAX_NESTING} deep")
        if (kind, value) == ("op", "!"):
            node: Node = Not(self.parse_unary())
            self.depth -= 1
            return node
        if (kind, value) == ("op", "("):
            node = self.parse_or()
            self.depth -= 1
            kind, value, pos = self.take()
            if (kind, value) != ("op", ")"):
                raise FilterError(self.text, pos, "expected )")
            return node
        if kind != "name":
            what = "end of filter" if kind == "end" else repr(value)
            raise FilterError(self.text, pos, f"expected a field name, found {what}")
        field, field_pos = value, pos
        transform: str | None = None
        if field in BYTE_ORDER_BITS and self.peek()[:2] == ("op", "("):
            self.take()
            kind, field, pos = self.take()
            if kind != "name":
                raise FilterError(self.text, pos, f"{value}() takes a field name, e.g. {value}(dport)")
            kind, closing, pos = self.take()
            if (kind, closing) != ("op", ")"):
                raise FilterError(self.text, pos, "expected )")
            transform = str(value)
        kind, op, pos = self.take()
        if kind != "op" or op not in COMPARATORS:
            what = "end of filter" if kind == "end" else repr(op)
            raise FilterError(self.text, pos, f"expected one of {' '.join(COMPARATORS)} after {field!r}, found {what}")
        kind, literal, pos = self.take()
        if kind == "name":
            raise FilterError(self.text, pos, f"quote the string: \"{literal}\" (fields are compared with values)")
        if kind not in ("num", "str"):
            what = "end of filter" if kind == "end" else repr(literal)
            raise FilterError(self.text, pos, f"expected a number or a quoted string, found {what}")
        if op == "~" and kind != "str":
            raise FilterError(self.text, pos, "~ matches a glob: give a quoted string")
        # what the token kinds checked above hold: a name, an operator, a number or a string
        assert isinstance(field, str) and isinstance(op, str) and isinstance(literal, (int, float, str))
        return Compare(field, op, literal, field_pos, transform)


def parse(text: str) -> Node:
    """The syntax tree of a filter, or a FilterError pointing at the offending column."""
    return _Parser(text).parse()


# --- a probe's own filter, checked before the probe is made ----------------------------------

# Fields every event has that the kernel's filter knows (besides the probe's own arguments).
COMMON_FIELDS = ("common_pid", "comm", "common_flags", "common_preempt_count", "common_type", "CPU")


class FilterFieldError(UserError):
    """A filter naming a field the event will not have; ``position`` is where in the filter."""

    def __init__(self, message: str, hint: str, position: int) -> None:
        super().__init__(message, hint)
        self.position = position


def check_fields(text: str, arg_names: list[str]) -> None:
    """Our filter grammar, and field names the kernel will know for this event (its args, common_*)."""
    node = parse(text)
    known = [*arg_names, *COMMON_FIELDS]
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, BoolOp):
            stack += [node.right, node.left]
        elif isinstance(node, Not):
            stack.append(node.operand)
        elif isinstance(node, Compare) and node.field not in known:
            raise FilterFieldError(f"{node.field!r}: this event has no such field", f"its fields: {', '.join(known)}",
                                   node.position)


# --- evaluation in our view ---------------------------------------------------------------

_NUMERIC = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b}


class _Fields:
    """One event's fields for one evaluation: its arguments are split at most once."""

    __slots__ = ("event", "_args")

    def __init__(self, event: Event) -> None:
        self.event = event
        self._args: dict | None = None

    def get(self, name: str):
        if name in HEADER_FIELDS:
            return self.event.field(name)
        if self._args is None:
            self._args = self.event.args
        return self._args.get(name)


def _compare(node: Compare) -> Callable[[_Fields], bool]:
    field, op, literal, transform = node.field, node.op, node.value, node.transform

    def plain(row: _Fields) -> object:
        return row.get(field)

    byte_order = transform or ""  # checked once here, not per event

    def swapped(row: _Fields) -> object:  # ntohs/ntohl: the value as the network wrote it
        value = row.get(field)
        return swap_bytes(value, byte_order) if isinstance(value, int) else None

    getter = swapped if transform else plain
    if op == "~":
        pattern = str(literal)  # the parser takes only a quoted string after ~
        return lambda ev: (v := getter(ev)) is not None and v is not FAULT and fnmatchcase(str(v), pattern)
    if isinstance(literal, str):
        if op in ("==", "!="):
            want = op == "=="
            return lambda ev: (v := getter(ev)) is not None and (str(v) == literal) == want
        test = _NUMERIC[op]
        return lambda ev: isinstance(v := getter(ev), str) and test(v, literal)
    if op in ("==", "!="):
        want = op == "=="
        return lambda ev: isinstance(v := getter(ev), (int, float)) and (v == literal) == want
    test = _NUMERIC[op]
    return lambda ev: isinstance(v := getter(ev), (int, float)) and test(v, literal)


def compile_filter(node: Node) -> Callable[[Event], bool]:
    """A predicate over events; a field an event lacks makes its comparison false."""
    predicate = _compile(node)
    return lambda event: predicate(_Fields(event))


def _compile(node: Node) -> Callable[[_Fields], bool]:
    if isinstance(node, Compare):
        return _compare(node)
    if isinstance(node, Const):
        return (lambda ev: True) if node.value else (lambda ev: False)
    if isinstance(node, Not):
        inner = _compile(node.operand)
        return lambda ev: not inner(ev)
    left, right = _compile(node.left), _compile(node.right)
    if node.op == "&&":
        return lambda ev: left(ev) and right(ev)
    return lambda ev: left(ev) or right(ev)


# --- push-down to the kernel's filter language ----------------------------------------------

def _specialise(node: Node, event: str, fields: dict[str, str]) -> Node:
    """``node`` decided as far as it can be for ``event``, then simplified.

    Comparisons on the event name become constants, and so do comparisons on an argument the
    event does not have (false, as in the view).
    """
    if isinstance(node, Compare):
        if node.field == "event":
            return Const(_compare(node)(_Fields(Event(0.0, 0, 0, None, "", "", event, ""))))
        if node.field not in fields and node.field not in HEADER_FIELDS:
            return Const(False)
        return node
    if isinstance(node, Not):
        inner = _specialise(node.operand, event, fields)
        return Const(not inner.value) if isinstance(inner, Const) else Not(inner)
    if isinstance(node, BoolOp):
        left, right = _specialise(node.left, event, fields), _specialise(node.right, event, fields)
        absorbing = node.op == "||"  # True absorbs ||, False absorbs &&
        for side, other in ((left, right), (right, left)):
            if isinstance(side, Const):
                return Const(absorbing) if side.value == absorbing else other
        return BoolOp(node.op, left, right)
    return node


def _kernel_text(node: Node, fields: dict[str, str], layout: dict[str, tuple[int, bool]]) -> str:
    """Kernel filter text for ``node``; raises ValueError naming what the kernel cannot say."""
    if isinstance(node, BoolOp):
        return f"({_kernel_text(node.left, fields, layout)} {node.op} {_kernel_text(node.right, fields, layout)})"
    if isinstance(node, Not):
        return f"!({_kernel_text(node.operand, fields, layout)})"
    if isinstance(node, Const):
        raise ValueError("a constant")
    if node.transform:
        return _swapped_kernel_text(node, fields, layout)
    name = node.field
    if name in fields:
        if name in KERNEL_HEADER:
            raise ValueError(f"{name!r} is both a header field and an argument")
        kind, kernel_name = fields[name], name
    elif name in KERNEL_HEADER:
        kind, kernel_name = ("str" if name == "comm" else "num"), KERNEL_HEADER[name]
    else:
        raise ValueError(f"the kernel has no field {name!r} for this event")
    literal = node.value
    if kind == "str":
        if not isinstance(literal, str) or node.op not in ("==", "!=", "~") or '"' in literal:
            raise ValueError(f"{name} {node.op} {literal!r} is not a kernel string comparison")
        return f'{kernel_name} {node.op} "{literal}"'
    if kind == "num" and isinstance(literal, int) and node.op != "~":
        return f"{kernel_name} {node.op} {literal}"
    raise ValueError(f"{name} {node.op} {literal!r} is not a kernel comparison for a {kind} field")


def _swapped_kernel_text(node: Compare, fields: dict[str, str], layout: dict[str, tuple[int, bool]]) -> str:
    """``ntohs(f) == N`` as ``f == swapped(N)``: only equality survives a byte swap, and only on a field
    exactly as wide as the swap (a wider one has other bytes the swap drops)."""
    transform = node.transform or ""  # called only for a swapped comparison
    said = f"{transform}({node.field}) {node.op} {node.value!r}"
    bits = BYTE_ORDER_BITS[transform]
    if fields.get(node.field) != "num" or node.field not in layout:
        raise ValueError(f"{said}: the kernel has no numeric field {node.field!r} of known width")
    size, signed = layout[node.field]
    if size * 8 != bits:
        raise ValueError(f"{said}: {node.field} is {size * 8} bits wide, {transform} swaps {bits}")
    if node.op not in ("==", "!=") or not isinstance(node.value, int):
        raise ValueError(f"{said}: byte-swapped values keep no order, only == and != go to the kernel")
    if not 0 <= node.value < 1 << bits:
        raise ValueError(f"{said}: {node.value} does not fit in {bits} bits")
    raw = swap_bytes(node.value, transform)
    if signed and raw >= 1 << (bits - 1):
        raw -= 1 << bits  # the kernel compares a signed field sign-extended
    return f"{node.field} {node.op} {raw}"


@dataclass
class PushDown:
    """Per event: the kernel filter text to write, or why the view alone applies the filter."""

    kernel: dict[str, str]  # event -> filter text ("" = every event of it matches: nothing to write)
    view_only: dict[str, str]  # event -> reason
    never: list[str]  # events the filter can never match (their events are dropped in the view)


def push_down(node: Node, event_fields: dict[str, dict[str, str] | None],
              event_layouts: dict[str, dict[str, tuple[int, bool]]] | None = None) -> PushDown:
    """Which part of the filter the kernel can apply, for each event ``name -> {field: kind}``.

    ``kind`` is "num", "str" or "other" (arrays, chars printed as text): see ``field_kinds``;
    None when the event's format could not be read (the view alone filters it).
    ``event_layouts`` gives each event's ``field_layout`` (for ``ntohs``/``ntohl``).
    """
    result = PushDown({}, {}, [])
    for event, fields in event_fields.items():
        if fields is None:
            result.view_only[event] = "its format file could not be read"
            continue
        specialised = _specialise(node, event, fields)
        if isinstance(specialised, Const):
            if specialised.value:
                result.kernel[event] = ""
            else:
                result.never.append(event)
            continue
        try:
            result.kernel[event] = _kernel_text(specialised, fields, (event_layouts or {}).get(event, {}))
        except ValueError as exc:
            result.view_only[event] = str(exc)
    return result


# The name is tried only where a word starts, and nothing is given back once taken (\b, *+): tried at
# every character, a 16000-character line took seconds (quadratic). A size has a few digits (int() refuses 4300).
_FIELD_LINE = re.compile(r"^\s*field:(?P<decl>[^;]*?)\b(?P<name>[A-Za-z_]\w*+)(?:\[\d*+\])?;"
                         r"\s*offset:\d+;\s*size:(?P<size>\d{1,10});\s*signed:(?P<signed>\d);", re.M)


def field_layout(format_text: str) -> dict[str, tuple[int, bool]]:
    """Each field of an event ``format`` file: (size in bytes, signed)."""
    return {m["name"]: (int(m["size"]), m["signed"] == "1") for m in _FIELD_LINE.finditer(format_text)}


_PRINTED = re.compile(r"""(?P<name>[A-Za-z_]\w*)=(?P<spec>\\"%s\\"|'%c'|\{[^}]*\}|(?:0x)?%[-+#0-9.]*(?P<conv>[a-zA-Z]+))""")


def field_kinds(format_text: str) -> dict[str, str]:
    """Argument fields of an event ``format`` file, each "num", "str" or "other".

    Read from the ``print fmt`` line: the format declares a char as u8, but prints it as ``'c'``.
    """
    fmt_line = next((line for line in format_text.splitlines() if line.startswith("print fmt:")), "")
    kinds: dict[str, str] = {}
    for m in _PRINTED.finditer(fmt_line):
        spec, conv = m["spec"], m["conv"] or ""
        if spec.startswith("\\"):
            kinds[m["name"]] = "str"
        elif conv and conv[-1] in "diuxX" and not conv.startswith("p"):
            kinds[m["name"]] = "num"
        else:
            kinds[m["name"]] = "other"  # chars, arrays, symbols and pointers stay in the view
    return kinds
