"""Parse an event's ``hist`` file: one table per hist trigger, its entries and its totals.

    # event histogram
    #
    # trigger info: hist:keys=common_pid.execname,len:vals=hitcount,len:sort=hitcount:size=2048 [active]
    #

    { common_pid: prog            [       181], len:         20 } hitcount:          2  len:         40
    <TAB>max:    5494887  lat:    5494887

    Totals:
        Hits: 6
        Entries: 3
        Dropped: 0

Keys are printed by modifier: a number right-aligned in 10 columns, ``.execname`` as the comm padded
to 16 then ``[pid]``, ``.log2`` as ``~ 2^N``, ``.buckets=S`` as ``~ LOW-HIGH``, ``.hex`` bare hex,
strings padded to 50; a value that follows on its own line starts with a tab (``<TAB>`` above).
Which modifier each key has is read from the table's own trigger info, so a
comm holding ``, `` or ``}`` cannot shift the fields. Numbers come back as the unsigned 64-bit the
kernel prints; signed fields are turned back by the caller (``as_signed``). Lines that fit nothing
are counted, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY_HEAD = "{ "
# A number the kernel prints is a u64 (20 digits at most): a longer run of digits is not one of its
# numbers, and int() refuses more than 4300 digits with a ValueError.
_NUMBER = r"\d{1,20}(?!\d)"
_VALUE = re.compile(rf"([\w.$-]+): +(-?{_NUMBER})")
_TOTAL = re.compile(rf"^\s*(Hits|Entries|Dropped): ({_NUMBER})\s*$")
_STATE = re.compile(r" \[(active|paused)\]$")


@dataclass(frozen=True)
class HistKey:
    name: str
    modifier: str | None = None  # execname, log2, buckets, hex, sym, ...
    size: int | None = None  # the .buckets=SIZE

    @property
    def text(self) -> str:
        if self.modifier == "buckets":
            return f"{self.name}.buckets={self.size}"
        return f"{self.name}.{self.modifier}" if self.modifier else self.name


@dataclass(frozen=True)
class HistEntry:
    key: tuple  # per key: int; (comm, pid) for .execname; the exponent N for .log2; LOW for .buckets; str for strings
    hitcount: int
    values: dict[str, int] = field(default_factory=dict)  # the summed vals
    extras: dict[str, int] = field(default_factory=dict)  # what handlers print under the entry: max, saved fields


@dataclass(frozen=True)
class HistTable:
    trigger: str  # as the kernel shows it, without [active]
    active: bool
    keys: tuple[HistKey, ...]
    entries: tuple[HistEntry, ...]
    hits: int
    entry_count: int
    dropped: int
    unparsed: int = 0  # entry lines that fit nothing

    @property
    def params(self) -> dict[str, str]:
        return trigger_params(self.trigger)


def trigger_params(trigger: str) -> dict[str, str]:
    """``hist:keys=a:vals=hitcount,b:x=expr:onmax($x).save(y) if f`` -> {keys, vals, x, handler..., filter}."""
    text, _, condition = trigger.partition(" if ")
    params: dict[str, str] = {}
    for part in text.split(":")[1:]:
        name, sep, value = part.partition("=")
        if sep and "(" not in name:
            params[name] = value
        else:
            params.setdefault("handlers", "")
            params["handlers"] += (":" if params["handlers"] else "") + part
    if condition:
        params["filter"] = condition
    return params


def parse_keys(keys_text: str) -> tuple[HistKey, ...]:
    keys = []
    for item in keys_text.split(","):
        name, _, modifier = item.partition(".")
        size = None
        if modifier.startswith("buckets="):
            text = modifier.split("=", 1)[1]
            modifier, size = "buckets", int(text) if re.fullmatch(_NUMBER, text, re.ASCII) else None
        keys.append(HistKey(name, modifier or None, size))
    return tuple(keys)


def _key_pattern(key: HistKey, strings: frozenset[str]) -> str:
    label = re.escape(key.name) + ": "
    if key.modifier == "execname":
        return label + rf"(?P<comm>.{{16}})\[ *(?P<pid>{_NUMBER})\]"
    if key.modifier == "log2":
        return label + rf"~ 2\^(?P<num>{_NUMBER}) *"
    if key.modifier == "buckets":
        return label + rf"~ (?P<num>{_NUMBER})-\d+"
    if key.modifier == "hex":
        return label + r"(?P<hex>[0-9a-f]+)"
    if key.modifier in ("sym", "sym-offset", "syscall") or key.name in strings:
        return label + r"(?P<text>.*?) *"
    return label + rf" *(?P<num>{_NUMBER})"


def _entry_parser(keys: tuple[HistKey, ...], strings: frozenset[str]):
    parts = []
    for index, key in enumerate(keys):
        # Name the groups per key: the same pattern appears once per key.
        parts.append(re.sub(r"\(\?P<(\w+)>", rf"(?P<\1_{index}>", _key_pattern(key, strings)))
    pattern = re.compile(r"^\{ " + ", ".join(parts) + rf" \}} hitcount: +(?P<hitcount>{_NUMBER})(?P<rest>.*)$")

    def parse(line: str) -> HistEntry | None:
        match = pattern.match(line)
        if match is None:
            return None
        groups = match.groupdict()
        key: list[tuple[str, int] | int | str] = []
        for index in range(len(keys)):
            if groups.get(f"comm_{index}") is not None:
                key.append((groups[f"comm_{index}"].rstrip(), int(groups[f"pid_{index}"])))
            elif groups.get(f"hex_{index}") is not None:
                key.append(int(groups[f"hex_{index}"], 16))
            elif groups.get(f"text_{index}") is not None:
                key.append(groups[f"text_{index}"])
            else:
                key.append(int(groups[f"num_{index}"]))
        values = {name: int(value) for name, value in _VALUE.findall(groups["rest"])}
        return HistEntry(tuple(key), int(groups["hitcount"]), values)

    return parse


def parse_hist(text: str, strings: frozenset[str] = frozenset()) -> list[HistTable]:
    """Every table of a ``hist`` file. ``strings``: the event's string fields (printed as text)."""
    tables: list[HistTable] = []
    trigger = ""
    active = True
    keys: tuple[HistKey, ...] = ()
    parse = None
    entries: list[HistEntry] = []
    totals: dict[str, int] = {}
    unparsed = 0

    def finish() -> None:
        if trigger:
            tables.append(HistTable(trigger, active, keys, tuple(entries), totals.get("Hits", 0),
                                    totals.get("Entries", len(entries)), totals.get("Dropped", 0), unparsed))

    for line in text.splitlines():
        if line.startswith("# trigger info: "):
            finish()
            info = line[len("# trigger info: "):].rstrip()
            state = _STATE.search(info)
            active = state is None or state[1] == "active"
            trigger = _STATE.sub("", info)
            keys = parse_keys(trigger_params(trigger).get("keys", ""))
            parse = _entry_parser(keys, strings)
            entries, totals, unparsed = [], {}, 0
        elif parse is None or not line.strip() or line.startswith("#") or line.strip() == "Totals:":
            continue
        elif line.startswith(_ENTRY_HEAD):
            entry = parse(line)
            if entry is None:
                unparsed += 1
            else:
                entries.append(entry)
        elif line[:1] in ("\t", " "):
            total = _TOTAL.match(line)
            if total:
                totals[total[1]] = int(total[2])
            elif entries:  # what a handler prints under its entry: "max: 27  next_comm: ..."
                entries[-1].extras.update((name, int(value)) for name, value in _VALUE.findall(line))
            else:
                unparsed += 1
        else:
            unparsed += 1
    finish()
    return tables


def table_texts(text: str) -> list[tuple[str, str]]:
    """Each table of a ``hist`` file as (its trigger, its lines), for a reader of its own (a stack's entries
    span lines); a synthetic event's file holds one table per trigger on it."""
    tables: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# trigger info: "):
            tables.append((_STATE.sub("", line[len("# trigger info: "):].rstrip()), []))
        elif tables:
            tables[-1][1].append(line)
    return [(trigger, "\n".join(lines)) for trigger, lines in tables]


def as_signed(value: int, bits: int = 64) -> int:
    """A value the kernel printed as unsigned, read back as the signed field it came from."""
    return value - (1 << bits) if value >= 1 << (bits - 1) else value
