"""What a person asks to probe, in perf-probe syntax, before anything is compiled.

A ``ProbeSpec`` is the C-level intent (``tcp_recvmsg sk->__sk_common.skc_state len``); the
compiler turns it into ``CompiledProbe``s (place + fetch-args) that the kernel accepts. Parsing
checks everything that does not need the kernel or the debug info, so bad input is reported
with the offending token before anything is written to tracefs.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace

from kprobe_tui.errors import UserError

# Kernel limits (kernel/trace/trace_probe.h): longer names or more args are refused with EINVAL.
MAX_EVENT_NAME_LEN = 64
MAX_ARG_NAME_LEN = 32
MAX_TRACE_ARGS = 128

DEFAULT_PERSISTENT_GROUP = "kprobe_tui"

LOCALS_GONE = "local variables are gone when the function returns"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INT_TYPE = re.compile(r"^[sux](8|16|32|64)$")
_BITFIELD_TYPE = re.compile(r"^b(\d+)@(\d+)/(8|16|32|64)$")
_ARRAY_TYPE = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<count>\d+)\]$")
_SCALAR_TYPES = {"char", "string", "ustring", "symbol", "symstr", "%pd", "%pD"}
_REGISTERS = {
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss", "ds", "es", "fs", "gs",
    *(f"r{n}" for n in range(8, 16)), "orig_ax",
}
# A C access path: identifier, then any of ->member, .member, [index].
_C_PATH = re.compile(r"^[A-Za-z_]\w*(?:(?:->|\.)[A-Za-z_]\w*|\[\d+\])*$")
_C_STEP = re.compile(r"->([A-Za-z_]\w*)|\.([A-Za-z_]\w*)|\[(\d+)\]")


@dataclass(frozen=True)
class Access:
    """One step of a C access path after the variable: ``->f`` (through a pointer), ``.f``, ``[n]``."""

    op: str  # "->", ".", "[]"
    member: str = ""
    index: int = 0

    def __str__(self) -> str:
        return f"[{self.index}]" if self.op == "[]" else f"{self.op}{self.member}"


@dataclass(frozen=True)
class ProbeArg:
    """One argument as written. ``kind`` tells the compiler what it is, ``text`` keeps the user's words."""

    text: str  # the expression as written, without NAME= and :TYPE
    kind: str  # "var", "retval", "params", "vars", "reg", "symbol", "argN", "comm", "raw"
    name: str | None = None  # the user's NAME=, validated
    type: str | None = None  # the user's :TYPE, validated
    var: str = ""  # for "var": the variable; for "reg"/"symbol": register/symbol name
    path: tuple[Access, ...] = ()
    index: int = 0  # for "argN"

    def __str__(self) -> str:
        named = f"{self.name}=" if self.name else ""
        typed = f":{self.type}" if self.type else ""
        return f"{named}{self.text}{typed}"


@dataclass(frozen=True)
class ProbeSpec:
    """A probe request: where (kernel function or ``-x BINARY`` place), what to capture, names, filter."""

    kind: str  # "entry", "return", "line" (also ;PTN), "offset" (+OFF or 0xADDR), "fprobe"
    function: str | None = None
    binary: str | None = None  # -x: a uprobe on this file; None: the kernel
    source: str | None = None  # FUNC@SRC, or SRC:ALN
    line: int | None = None  # relative to the function start (RLN) when function is set, else absolute
    offset: int = 0  # +OFF
    lazy: str | None = None  # ;PTN
    address: int | None = None  # a raw 0xADDR place
    group: str | None = None
    event: str | None = None
    args: tuple[ProbeArg, ...] = ()
    filter: str | None = None
    fprobe_return: bool = False  # an fprobe on function exit

    @property
    def is_return(self) -> bool:
        return self.kind == "return" or (self.kind == "fprobe" and self.fprobe_return)

    @property
    def is_uprobe(self) -> bool:
        return self.binary is not None

    def place_text(self) -> str:
        """The place as perf syntax writes it (without group/event and args)."""
        if self.address is not None:
            return f"0x{self.address:x}" + ("%return" if self.is_return else "")
        text = self.function or ""
        if self.source:
            text = f"{text}@{self.source}" if self.function else self.source
        if self.line is not None:
            text += f":{self.line}"
        if self.offset:
            text += f"+{self.offset}"
        if self.is_return:
            text += "%return"
        if self.lazy is not None:
            text += f";{self.lazy}"
        return text


def _fail(token: str, why: str, hint: str) -> UserError:
    return UserError(f"{token!r}: {why}", hint)


def check_name(name: str, what: str, limit: int) -> str:
    """A group, event or argument name the kernel accepts, or a UserError naming it."""
    if not _NAME.match(name):
        raise _fail(name, f"not a valid {what} name", "use letters, digits and '_', not starting with a digit")
    if len(name) > limit:
        raise _fail(name, f"{what} name is {len(name)} characters, the kernel takes at most {limit}", "pick a shorter name")
    return name


def check_type(type_text: str) -> str:
    """A fetch-arg type the kernel knows (kprobetrace.rst "Types"), or a UserError naming it."""
    array = _ARRAY_TYPE.match(type_text)
    base = array["base"] if array else type_text
    if array and not 0 < int(array["count"]) <= 64:
        raise _fail(type_text, "array size must be 1..64", "e.g. :u8[16]")
    if _INT_TYPE.match(base) or base in _SCALAR_TYPES:
        return type_text
    bits = _BITFIELD_TYPE.match(base)
    if bits and not array:
        width, offset, container = (int(v) for v in bits.groups())
        if 0 < width and width + offset <= container:
            return type_text
        raise _fail(type_text, "bitfield does not fit in its container", "b<width>@<bit-offset>/<container-bits>")
    raise _fail(
        type_text,
        "unknown type",
        "use s8/16/32/64, u8/16/32/64, x8/16/32/64, char, string, ustring, symbol, b<w>@<o>/<c>, or <type>[N]",
    )


def _parse_number(token: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise _fail(token, f"{text!r} is not a number", "offsets and lines are decimal or 0x-hex") from None


def parse_arg(text: str) -> ProbeArg:
    """``[NAME=]EXPR[:TYPE]`` where EXPR is a C path, $retval/$params/$vars/$argN/$comm, %REG or @SYM."""
    token = text
    name = type_ = None
    head = re.match(r"^([^=()]+)=(.+)$", text)
    if head:
        name, text = check_name(head[1], "argument", MAX_ARG_NAME_LEN), head[2]
    # A type follows the last ':' that is not part of "::" and not inside (...) of a raw fetch-arg.
    colon = text.rfind(":")
    if colon > 0 and ")" not in text[colon:]:
        text, type_ = text[:colon], check_type(text[colon + 1 :])
    if not text:
        raise _fail(token, "empty argument", "write a variable, $retval, $argN, %REG or @SYMBOL")
    arg = _classify(token, text)
    return replace(arg, name=name, type=type_)


def _classify(token: str, text: str) -> ProbeArg:
    if text in ("$retval", "$params", "$vars", "$comm"):
        return ProbeArg(text, text[1:])
    if re.match(r"^\$arg\d+$", text):
        index = int(text[4:])
        if not 1 <= index <= MAX_TRACE_ARGS:
            raise _fail(token, "argument numbers start at 1", "$arg1 is the first parameter")
        return ProbeArg(text, "argN", index=index)
    if re.match(r"^\$stack\d*$", text):
        return ProbeArg(text, "raw")
    if text.startswith("$"):
        raise _fail(token, "unknown special variable", "use $retval, $params, $vars, $argN, $comm or $stackN")
    if text.startswith("%"):
        reg = text[1:]
        if reg.startswith("e") or reg.startswith("r") and reg[1:] in _REGISTERS:
            reg = reg[1:]  # %rdi / %edi -> di, as perf accepts
        if reg not in _REGISTERS:
            raise _fail(token, f"unknown x86_64 register {text!r}", "e.g. %di, %si, %dx, %cx, %r8, %ax, %sp")
        return ProbeArg(text, "reg", var=reg)
    if text.startswith("@"):
        sym = re.match(r"^@([A-Za-z_.][\w.]*)([+-](?:0x[0-9a-fA-F]+|\d+))?$", text)
        if not sym:
            raise _fail(token, "not a symbol", "write @symbol or @symbol+offset")
        return ProbeArg(text, "symbol", var=sym[1], index=int(sym[2] or "0", 0))
    if text[0] in "+-\\":
        return ProbeArg(text, "raw")  # a kernel fetch-arg written by hand, e.g. +8(%di)
    if not _C_PATH.match(text):
        raise _fail(token, "not a variable access", "write var, var->member, var.member or var[N]")
    var = re.match(r"^[A-Za-z_]\w*", text)[0]
    path = tuple(
        Access("->", m[1]) if m[1] else Access(".", m[2]) if m[2] else Access("[]", index=int(m[3]))
        for m in _C_STEP.finditer(text[len(var) :])
    )
    return ProbeArg(text, "var", var=var, path=path)


_PLACE = re.compile(
    r"""^(?P<func>[A-Za-z_./][\w./-]*?)?        # FUNC or SRC
        (?:@(?P<src>[^:+%;\s]+))?               # @SRC
        (?::(?P<line>\d+))?                     # :RLN / :ALN
        (?:\+(?P<off>0x[0-9a-fA-F]+|\d+))?      # +OFF
        (?P<ret>%return)?
        (?:;(?P<lazy>.+))?$""",
    re.X,
)


def parse_spec(
    words: list[str] | str,
    *,
    binary: str | None = None,
    fprobe: bool = False,
    group: str | None = None,
    filter: str | None = None,
) -> ProbeSpec:
    """Parse ``[[GROUP:]EVENT=]PLACE [ARG ...]`` (perf probe's syntax; see ``perf-probe(1)``)."""
    if isinstance(words, str):
        words = shlex.split(words)
    if not words:
        raise UserError("no probe point given", "e.g. kprobe-tui probe 'do_sys_openat2 filename:string'")
    head, *arg_words = words
    event = None
    named = re.match(r"^(?:([^:=;]+):)?([^:=;]+)=([^;]+(?:;.*)?)$", head)  # an ;PATTERN may hold '='
    if named:
        group = check_name(named[1], "group", MAX_EVENT_NAME_LEN) if named[1] else group
        event, head = check_name(named[2], "event", MAX_EVENT_NAME_LEN), named[3]
    if group is not None:
        check_name(group, "group", MAX_EVENT_NAME_LEN)
    spec = _parse_place(head, binary, fprobe)
    args = tuple(parse_arg(word) for word in arg_words)
    if len(args) > MAX_TRACE_ARGS:
        raise UserError(f"{len(args)} arguments: the kernel takes at most {MAX_TRACE_ARGS}", "capture fewer values")
    # Parameters (and globals) can be read at exit, where the kernel saves entry arguments; which
    # names are locals only the debug info tells, so the compiler refuses those. $vars is locals.
    all_locals = next((a for a in args if a.kind == "vars"), None)
    if spec.is_return and all_locals:
        raise _fail(str(all_locals), LOCALS_GONE, "capture $params or $retval, or probe the entry")
    if not spec.is_return and any(a.kind == "retval" for a in args):
        raise _fail("$retval", "only a return probe has a return value", f"probe {head}%return")
    return replace(spec, group=group, event=event, args=args, filter=filter or None)


def _parse_place(head: str, binary: str | None, fprobe: bool) -> ProbeSpec:
    if re.match(r"^0x[0-9a-fA-F]+(%return)?$", head):
        ret = head.endswith("%return")
        address = int(head.removesuffix("%return"), 16)
        return ProbeSpec("return" if ret else "offset", binary=binary, address=address)
    match = _PLACE.match(head)
    if not match or not (match["func"] or match["src"]):
        raise _fail(head, "not a probe point", "FUNC[@SRC][:RLN|+OFF|%return|;PTN] or SRC:ALN")
    func, src = match["func"], match["src"]
    line = int(match["line"]) if match["line"] else None
    offset = _parse_number(head, match["off"]) if match["off"] else 0
    ret, lazy = bool(match["ret"]), match["lazy"]
    if func and ("/" in func or re.search(r"\.(c|h|cc|cpp|S)$", func)) and not src:
        func, src = None, func  # SRC:ALN / SRC;PTN
        if line is None and lazy is None:
            raise _fail(head, "a source file needs a line or a pattern", f"{head}:LINE or {head};PATTERN")
    chosen = [name for name, given in (("line", line is not None), ("+offset", offset), ("%return", ret), (";pattern", lazy)) if given]
    if len(chosen) > 1:
        raise _fail(head, f"{' and '.join(chosen)} cannot be combined", "pick one of :LINE, +OFF, %return, ;PATTERN")
    if fprobe:
        if binary or line is not None or offset or lazy:
            raise _fail(head, "fprobes attach to kernel function entry or exit only", "drop --fprobe, or probe FUNC / FUNC%return")
        return ProbeSpec("fprobe", function=func, fprobe_return=ret)
    kind = "return" if ret else "line" if line is not None or lazy else "offset" if offset else "entry"
    return ProbeSpec(kind, function=func, binary=binary, source=src, line=line, offset=offset, lazy=lazy)


@dataclass(frozen=True)
class FetchArg:
    """One compiled argument: what the kernel fetches (``+18(%di)``) and as what type."""

    name: str
    fetch: str
    type: str | None = None
    source: ProbeArg | None = None  # the argument as written, when there is one

    def render(self) -> str:
        return f"{self.name}={self.fetch}" + (f":{self.type}" if self.type else "")


@dataclass(frozen=True)
class CompiledProbe:
    """A probe the kernel can take: group/event, place (``func+0`` or ``/path:0xOFF``), fetch-args."""

    spec: ProbeSpec
    group: str
    event: str
    place: str
    args: tuple[FetchArg, ...] = ()
    function: str | None = None  # the function symbol the place is in
    function_offset: int = 0  # bytes from that symbol (bpftrace and perf name places this way)
    notes: tuple[str, ...] = ()  # what a learner should know: prologue skipped, inlined copy, ...
    maxactive: int | None = None  # a kretprobe: how many calls may be inside the function at once

    @property
    def control_file(self) -> str:
        """The tracefs file that takes this definition (fprobes exist only in dynamic_events)."""
        if self.spec.kind == "fprobe":
            return "dynamic_events"
        return "uprobe_events" if self.spec.is_uprobe else "kprobe_events"

    @property
    def prefix(self) -> str:
        if self.spec.kind == "fprobe":
            return "f"
        return "r" if self.spec.is_return else "p"

    def definition(self) -> str:
        """The line written to tracefs (kprobetrace.rst / uprobetracer.rst / fprobetrace.rst)."""
        place = self.place + ("%return" if self.spec.kind == "fprobe" and self.spec.is_return else "")
        active = self.maxactive if self.prefix == "r" and self.maxactive and not self.spec.is_uprobe else ""
        words = [f"{self.prefix}{active}:{self.group}/{self.event}", place, *(a.render() for a in self.args)]
        return " ".join(words)
