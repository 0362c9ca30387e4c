"""Decode one event's binary trace records, compiled from the event's ``format`` file.

A reader of the per-CPU ``trace_pipe_raw`` pages skips the kernel's text formatting, so it must
redo it: this module turns a record into the very ``Event`` the text parser makes of the line
``trace_pipe`` prints for it (filter, store, detail, JSON and the aggregator take either). The
``format`` file gives each field's offset, size and sign; its ``print fmt`` gives each argument's
printed form (``%u``, ``%d``, ``0x%x``, ``'%c'``, ``"%s"``, ``{..,..}`` for arrays). Where the
kernel's text of a probe event differs from its ``print fmt``, the text wins, because that is what
the text parser sees:

- the probe site is printed ``(0x%lx)``, a return probe's ``(0x<return address> <- 0x<function>)``
  (``print fmt`` says ``(%lx <- %lx)`` with the function first); this is a uprobe's site: a kprobe's,
  kretprobe's or fprobe's is named by kallsyms (``func+0x0/0x1a0``, stream/ksyms.py), as is a
  ``symbol`` argument (``%pS``), when ``compile_format`` is given the kernel's symbols;
- a probe's string argument that could not be read (length 0) is printed ``(fault)``, unquoted.

A record that does not fit its format (cut short, of another event, a string outside it) raises
``RecordError``, which a reader counts as the text parser counts garbled lines.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, ClassVar, NamedTuple, cast

from kprobe_tui.errors import UserError
from kprobe_tui.stream.ksyms import KernelSymbols
from kprobe_tui.stream.parser import Event

FIELD = re.compile(r"^\s*field:\s*(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);\s*signed:(?P<signed>[01]);", re.M)
_DECL = re.compile(r"(?P<loc>__data_loc |__rel_loc )?(?P<type>.+?)\s*(?P<dims>(?:\[\d*\])*)\s+(?P<name>\w+)(?P<after>(?:\[\d*\])*)")
_NAME = re.compile(r"^name: (\S+)$", re.M)
_ID = re.compile(r"^ID: (\d+)$", re.M)
# A conversion of the kernel's printf that Python's % formats alike once the length modifier is
# dropped; widths of at most 3 digits (a hostile ``%999999999d`` would build a gigabyte per event).
_CONVERSION = re.compile(r"%(?:(?P<percent>%)|(?P<flags>[-+ 0]*)(?P<width>\d{0,3})(?P<precision>\.\d{1,3})?"
                         r"(?:hh|h|ll|l|L|z|j|t)?(?P<conv>[diuxXcs]|pS)(?![a-zA-Z]))")
_REC = re.compile(r"REC->(\w+)(?:\[(\d+)\])?")
_GET_STR = re.compile(r"__get_str\((\w+)(?:\[(\d+)\])?\)")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}
_SIGNED_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_ELEMENT_SIZES = {"u8": 1, "s8": 1, "char": 1, "unsigned char": 1, "signed char": 1, "bool": 1,
                  "u16": 2, "s16": 2, "short": 2, "unsigned short": 2,
                  "u32": 4, "s32": 4, "int": 4, "unsigned int": 4, "pid_t": 4,
                  "u64": 8, "s64": 8, "long": 8, "unsigned long": 8, "long long": 8, "unsigned long long": 8}
MAX_FIXED = 1 << 16  # a record's fixed part: its __data_loc offsets are 16 bits, so nothing real is larger
# Each byte as the text reader shows it: the kernel prints a char as the raw byte, the reader
# decodes lines as UTF-8 with backslashreplace.
_CHARS = tuple(bytes((byte,)).decode("utf-8", "backslashreplace") for byte in range(256))
_COMMON = ("common_type", "common_flags", "common_preempt_count", "common_pid")
# The common fields where every kernel since 2.6 puts them (checked per format): type, flags with the preempt
# count above them (one int: the key of the flags column's cache), pid.
HEADER = struct.Struct("<HHi")
_ULONG_MAX = (1 << 64) - 1
_HEADER_LAYOUT = ((0, 2), (2, 1), (3, 1), (4, 4))


class RecordError(UserError):
    """A record that does not fit its event's format; a reader counts it and goes on."""


class FormatField(NamedTuple):
    name: str
    type: str  # the C type, without __data_loc and array brackets
    offset: int
    size: int
    signed: bool
    location: str  # "" for a field held in the record's fixed part, "__data_loc" or "__rel_loc"
    elements: int  # 1 for a scalar, N for an array (or N __data_loc words)


class FormatFile(NamedTuple):
    name: str
    id: int
    fields: dict[str, FormatField]
    print_fmt: str  # the quoted format, unescaped
    print_args: list[str]


def parse_format(text: str) -> FormatFile:
    """The parts of a ``format`` file (UserError when one is missing or malformed)."""
    name, ident = _NAME.search(text), _ID.search(text)
    if name is None or ident is None:
        raise UserError("not an event format file: it has no name: or ID: line", "read events/<group>/<event>/format")
    event = name[1]
    fields = {}
    for match in FIELD.finditer(text):
        field = _field(event, match)
        fields[field.name] = field
    missing = [common for common in _COMMON if common not in fields]
    if missing:
        raise UserError(f"event {event}'s format has no {', '.join(missing)}", "read events/<group>/<event>/format")
    print_fmt, print_args = _print_fmt(event, text)
    return FormatFile(event, int(ident[1]), fields, print_fmt, print_args)


def _field(event: str, match: re.Match) -> FormatField:
    decl, offset, size = match["decl"].strip(), int(match["offset"]), int(match["size"])
    parsed = _DECL.fullmatch(decl)
    if parsed is None or size <= 0 or offset + size > MAX_FIXED:
        raise UserError(f"event {event}'s format has a field this decoder cannot read: {decl!r} at {offset}, size {size}")
    location = (parsed["loc"] or "").strip()
    if location:
        # "__data_loc char[] s" is one location word, "__data_loc char[][2] s" (a probe's string array) two
        count = int(parsed["dims"].rpartition("[")[2][:-1] or 1)
        if size != 4 * count:
            raise UserError(f"event {event}'s field {decl!r} is {size} bytes, not {4 * count} for {count} location word(s)")
    elif parsed["after"]:
        element = _ELEMENT_SIZES.get(parsed["type"])
        if element is None or size % element:
            raise UserError(f"event {event}'s array {decl!r} has elements of an unknown size")
        count = size // element
    else:
        count = 1
    return FormatField(parsed["name"], parsed["type"], offset, size, match["signed"] == "1", location, count)


def _print_fmt(event: str, text: str) -> tuple[str, list[str]]:
    """The ``print fmt:`` line's C string (escapes undone) and its arguments, split at top-level commas."""
    start = text.find('print fmt: "')
    if start < 0:
        raise UserError(f"event {event}'s format has no print fmt line", "read events/<group>/<event>/format")
    chars, at = [], start + len('print fmt: "')
    while at < len(text) and text[at] != '"':
        if text[at] == "\\" and at + 1 < len(text):
            at += 1
            chars.append(_ESCAPES.get(text[at], "\\" + text[at]))
        else:
            chars.append(text[at])
        at += 1
    if at >= len(text):
        raise UserError(f"event {event}'s print fmt has no closing quote")
    rest = text[at + 1:].split("\n", 1)[0]
    args: list[str] = []
    current: list[str] = []
    depth = 0
    for char in rest:
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    args.append("".join(current).strip())
    if args[0]:
        raise UserError(f"event {event}'s print fmt has text between the format and its arguments: {rest!r}")
    return "".join(chars), args[1:]


class _Slot(NamedTuple):
    """A field as unpacked: its struct code, and how its value is shown (None: as a number)."""

    field: FormatField
    code: str
    render: Callable[[bytes, Any], str] | None


class RawEvent(Event):
    """An Event decoded from a binary record, which it holds where the text event holds its body: the body is
    printed from it when first asked for, each time (a flood is stored far more often than looked at, and
    printing is most of a decode: 3.3 of 4.1 us for a record of 25 arguments, measured on this machine).
    Each event has a subclass of its own, whose ``decoder`` prints it."""

    __slots__ = ()
    decoder: ClassVar[EventDecoder]

    @property
    def body(self) -> str:
        return self.decoder.render(cast(bytes, tuple.__getitem__(self, 7)))  # the record, in the body's place

    def printed(self) -> Event:
        """The same event as the text parser gives it: the body printed once and kept."""
        return tuple.__new__(Event, (*self[:7], self.body, self.stack))


class EventDecoder:
    """``decode(record, ts, cpu, comm)`` -> the Event that ``trace_pipe`` text would give."""

    def __init__(self, name: str, ident: int, fixed: struct.Struct, body: str, pick: Callable[[Sequence], tuple],
                 renders: list[tuple[int, Callable[[bytes, Any], str]]]) -> None:
        self.name = name
        self.id = ident
        self._fixed = fixed
        self.size = fixed.size  # a record's fixed part: a record is at least this long
        self._body = body
        self._pick = pick
        self._renders = renders
        self._flags: dict[int, str] = {}  # common_flags | common_preempt_count << 8 -> the column
        self._flags_column = True  # the irq-info option (trace_print_context)
        self.event_type: type[RawEvent] = type(f"RawEvent_{ident}", (RawEvent,), {"__slots__": (), "decoder": self})

    def decode(self, record: bytes, ts: float, cpu: int, comm: str, tgid: int | None = None) -> Event:
        """The event of ``record`` (RecordError when it is too short or of another event; a string outside it
        is said so in the body, printed later)."""
        try:
            ident, flags, pid = HEADER.unpack_from(record)
        except struct.error:
            raise RecordError(f"a record of {len(record)} bytes has no room for its common fields") from None
        if ident != self.id:
            raise RecordError(f"a record of event type {ident} was given to the decoder of {self.name} ({self.id})")
        return self.event(record, ts, cpu, pid, flags, comm, tgid)

    def event(self, record: bytes, ts: float, cpu: int, pid: int, flags: int, comm: str, tgid: int | None) -> Event:
        """``decode`` for a reader that unpacked the record's ``HEADER`` itself (to find its decoder and comm)."""
        if len(record) < self.size:
            raise RecordError(f"a record of {self.name} is {len(record)} bytes, shorter than its fixed {self.size}")
        shown = self._flags.get(flags)
        if shown is None:
            shown = self._flags[flags] = latency_flags(flags & 0xFF, flags >> 8) if self._flags_column else ""
        return tuple.__new__(self.event_type, (ts, cpu, pid, tgid, comm, shown, self.name, record, None))

    def show_flags(self, shown: bool) -> None:
        """Whether events have the flags column: the text has it while the instance's irq-info option is on."""
        if shown != self._flags_column:
            self._flags_column = shown
            self._flags.clear()

    def render(self, record: bytes) -> str:
        """The body the kernel's text prints for ``record`` (one ``decode`` accepted)."""
        values: Sequence = self._fixed.unpack_from(record)
        if self._renders:  # strings and chars replace their raw values (a list only then: it costs 0.2 us an event)
            values = rendered = list(values)
            for at, render in self._renders:
                rendered[at] = render(record, rendered[at])
        return self._body % self._pick(values)


class StackDecoder:
    """The frames of a ``kernel_stack`` record (events/ftrace/kernel_stack), as the text prints them under its
    event (``trace_stack_print``): each return address named (with its offset under the sym-offset option), up
    to the record's end or the ULONG_MAX that ends a short stack."""

    TRAMPOLINE = (1 << 31) - 1  # FTRACE_TRAMPOLINE_MARKER: a frame in an ftrace trampoline

    def __init__(self, text: str, symbols: KernelSymbols, offset: bool) -> None:
        ident = _ID.search(text)  # its print fmt is several C strings in a row, which parse_format refuses
        fields = {field.name: field for field in (_field("kernel_stack", match) for match in FIELD.finditer(text))}
        caller = fields.get("caller")
        if ident is None or caller is None or caller.size // caller.elements != 8:
            raise UserError("the kernel_stack event's format has no ID or no caller array of 8-byte addresses")
        self.id = int(ident[1])
        self._start = caller.offset
        self._symbols = symbols
        self._offset = offset

    def frames(self, record: bytes) -> tuple[str, ...]:
        count = max(0, (len(record) - self._start) // 8)
        frames = []
        for address in struct.unpack_from(f"<{count}Q", record, self._start):
            if address == _ULONG_MAX:
                break
            frames.append("[FTRACE TRAMPOLINE]" if address == self.TRAMPOLINE else self._symbols.site(address, self._offset))
        return tuple(frames)


def compile_format(text: str, symbols: KernelSymbols | None = None) -> EventDecoder:
    """A decoder of the records of the event whose ``format`` file is ``text`` (UserError for what it cannot render).

    ``symbols``: the event is a kernel probe, whose site (and ``symbol`` arguments) the text names by kallsyms;
    without them a probe's site is printed as a uprobe's, a number."""
    fmt = parse_format(text)
    probe = "__probe_ip" in fmt.fields or "__probe_ret_ip" in fmt.fields
    args = list(fmt.print_args)
    if probe and args[:2] == ["REC->__probe_func", "REC->__probe_ret_ip"]:
        args[:2] = args[1::-1]  # the text prints (return address <- function)
    literal, pieces, wanted, at = fmt.print_fmt, [], [], 0
    conversions = list(_CONVERSION.finditer(literal))
    stray = literal.replace("%%", "").count("%") - sum(1 for c in conversions if not c["percent"])
    if stray:
        raise UserError(f"event {fmt.name}'s print fmt has a conversion this decoder cannot render: {literal!r}")
    numbered = [c for c in conversions if not c["percent"]]
    if len(numbered) != len(args):
        raise UserError(f"event {fmt.name}'s print fmt has {len(numbered)} conversions for {len(args)} arguments")
    arg_of = dict(zip((c.start() for c in numbered), args))
    for conversion in conversions:
        pieces.append(literal[at:conversion.start()].replace("%", "%%"))
        at = conversion.end()
        if conversion["percent"]:
            pieces.append("%%")
            continue
        arg = arg_of[conversion.start()]
        spec = f"%{conversion['flags']}{conversion['width']}{conversion['precision'] or ''}"
        conv = conversion["conv"]
        string = _GET_STR.fullmatch(arg)
        if string:
            if conv != "s":
                raise UserError(f"event {fmt.name} prints string {arg} with %{conv}")
            # A probe's string: the kernel prints it quoted, or (fault) bare
            quoted = probe and pieces[-1].endswith('"') and literal[at:at + 1] == '"'
            if quoted:
                pieces[-1], at = pieces[-1][:-1], at + 1
            wanted.append((string[1], int(string[2] or 0), "s", quoted))
            pieces.append(spec + "s")
            continue
        number = _REC.fullmatch(arg)
        if number is None:
            raise UserError(f"event {fmt.name} prints {arg!r}, which this decoder cannot render",
                            "tail it with the text reader")
        if number[1].startswith("__probe_"):
            pieces.append("0x%x" if symbols is None else "%s")
            # the kernel's own: the site with its offset, a return probe's function without
            conv = "x" if symbols is None else "function" if number[1] == "__probe_func" else "site"
        elif conv == "pS":
            if symbols is None:
                raise UserError(f"event {fmt.name} prints {arg} as a kernel symbol: its decoder needs kallsyms")
            pieces.append(spec + "s")
        else:
            pieces.append(spec + ("d" if conv in "diu" else "s" if conv in "cs" else conv))
        wanted.append((number[1], int(number[2] or 0), conv, False))
    pieces.append(literal[at:].replace("%", "%%"))
    return _assemble(fmt, "".join(pieces), wanted, symbols)


def _assemble(fmt: FormatFile, body: str, wanted: list[tuple[str, int, str, bool]],
              symbols: KernelSymbols | None) -> EventDecoder:
    """One struct for every field printed, and where each argument is in its values."""
    layout = tuple((fmt.fields[name].offset, fmt.fields[name].size) for name in _COMMON)
    if layout != _HEADER_LAYOUT:
        raise UserError(f"event {fmt.name}'s common fields are laid out {layout}, not as this decoder knows {_HEADER_LAYOUT}")
    slots: dict[str, _Slot] = {}
    for name, index, conv, quoted in wanted:
        printed = fmt.fields.get(name)
        if printed is None:
            raise UserError(f"event {fmt.name}'s print fmt names a field it does not have: {name}")
        if index >= printed.elements:
            raise UserError(f"event {fmt.name} prints {name}[{index}] of {printed.elements}")
        if name not in slots:
            slots[name] = _slot(fmt.name, printed, conv, quoted, symbols)
    ordered = sorted(slots.values(), key=lambda slot: slot.field.offset)
    codes, first, end, unpacked = [f"<{HEADER.size}x"], {}, HEADER.size, 0
    for slot in ordered:
        if slot.field.offset < end:
            raise UserError(f"event {fmt.name}'s field {slot.field.name} overlaps the field before it")
        codes.append(f"{slot.field.offset - end}x{slot.code}" if slot.field.offset > end else slot.code)
        first[slot.field.name] = unpacked
        unpacked += _values(slot)
        end = slot.field.offset + slot.field.size
    renders = [(first[s.field.name] + i, s.render) for s in ordered if s.render for i in range(_values(s))]
    indices = [first[name] + index for name, index, _, _ in wanted]
    return EventDecoder(fmt.name, fmt.id, struct.Struct("".join(codes)), body, _picker(indices), renders)


def _picker(indices: list[int]) -> Callable[[Sequence], tuple]:
    """The arguments of the body's % from the unpacked values (always a tuple, which % needs)."""
    if len(indices) > 1:
        return itemgetter(*indices)

    def pick(values: Sequence) -> tuple:
        return tuple(values[at] for at in indices)

    return pick


def _values(slot: _Slot) -> int:
    """How many values the slot's struct code unpacks to."""
    return 1 if slot.code.endswith("s") else slot.field.elements


def _slot(event: str, field: FormatField, conv: str, quoted: bool, symbols: KernelSymbols | None) -> _Slot:
    if symbols is not None and conv in ("site", "function", "pS"):
        if field.elements != 1:
            raise UserError(f"event {event} prints its array {field.name} as kernel addresses")
        return _Slot(field, _code(event, field, "x"), _symbol_reader(symbols, conv))
    if field.location:
        if conv != "s":
            raise UserError(f"event {event} prints its string {field.name} with %{conv}")
        return _Slot(field, f"{field.elements}I", _location_reader(field, quoted))
    if conv == "s":
        if field.type != "char" or field.elements == 1:
            raise UserError(f"event {event} prints its field {field.name} ({field.type}) with %s")
        return _Slot(field, f"{field.size}s", _fixed_string)
    if conv == "c":
        return _Slot(field, _code(event, field, conv), _char)
    return _Slot(field, _code(event, field, conv), None)


def _code(event: str, field: FormatField, conv: str) -> str:
    """The struct code of a number field: signed when printed signed (%d), whatever its C type."""
    element = field.size // field.elements
    if element not in _SIGNED_CODES:
        raise UserError(f"event {event}'s field {field.name} has {element}-byte values")
    code = _SIGNED_CODES[element] if conv in "di" else _SIGNED_CODES[element].upper()
    return f"{field.elements}{code}" if field.elements > 1 else code


def _symbol_reader(symbols: KernelSymbols, conv: str) -> Callable[[bytes, Any], str]:
    """Names a kernel address: a probe's site (``site``: with its offset, ``function``: without) or ``%pS``."""
    offset = conv == "site"

    def read(record: bytes, address: int) -> str:
        return symbols.pointer(address) if conv == "pS" else symbols.site(address, offset)

    return read


def _char(record: bytes, value: int) -> str:
    return _CHARS[value]


def _fixed_string(record: bytes, value: bytes) -> str:
    return value.split(b"\0", 1)[0].decode("utf-8", "backslashreplace")


def _location_reader(field: FormatField, quoted: bool) -> Callable[[bytes, Any], str]:
    """Reads the string a __data_loc word (offset in its low 16 bits, length with the NUL in the high 16) points to.

    Checked here, when printed, not on decode: a check of every string of every record costs ~0.15 us each."""
    base = field.offset + field.size if field.location == "__rel_loc" else 0

    def read(record: bytes, location: int) -> str:
        start, length = base + (location & 0xFFFF), location >> 16
        if not length:
            return "(fault)" if quoted else ""
        if start + length > len(record):
            return f"(string {field.name} runs past the end of its record: {start}+{length} > {len(record)})"
        end = record.find(b"\0", start, start + length)
        text = record[start:end if end >= 0 else start + length].decode("utf-8", "backslashreplace")
        return f'"{text}"' if quoted else text

    return read


def latency_flags(flags: int, preempt: int) -> str:
    """The kernel's irqs-off/need-resched/hardirq/preempt-depth/migrate-disable column (trace_print_lat_fmt, 6.13+)."""
    irqs_off, lazy, need_resched, hardirq, softirq, preempt_resched, nmi, bh_off = (flags >> bit & 1 for bit in range(8))
    first = "D" if irqs_off and bh_off else "d" if irqs_off else "b" if bh_off else "."
    resched = {(1, 1, 1): "B", (1, 0, 1): "N", (0, 1, 1): "L", (1, 1, 0): "b",
               (1, 0, 0): "n", (0, 0, 1): "p", (0, 1, 0): "l"}.get((need_resched, lazy, preempt_resched), ".")
    irq = ("Z" if hardirq else "z") if nmi else "H" if hardirq and softirq else "h" if hardirq else "s" if softirq else "."
    depth = f"{preempt & 0xF:x}" if preempt & 0xF else "."
    migrate = f"{preempt >> 4 & 0xF:x}" if preempt & 0xF0 else "."
    return first + resched + irq + depth + migrate
