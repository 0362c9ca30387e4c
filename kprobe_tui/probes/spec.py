"""What a person asks to probe, in perf-probe syntax, before anything is compiled.

A ``ProbeSpec`` is the C-level intent (``tcp_recvmsg sk->__sk_common.skc_state len``); the
compiler turns it into ``CompiledProbe``s (place + fetch-args) that the kernel accepts. Parsing
checks everything that does not need the kernel or the debug info, so bad input is reported
with the offending token before anything is written to tracefs.

Everything here is untrusted text that ends up in a line the kernel parses by spaces, runs line
by line and cuts at '#': names are checked against exactly what the kernel takes, raw fetch-args
against its fetch-arg grammar, paths for what a definition line cannot say, and
``CompiledProbe.check`` proves the finished line is one definition before it is written.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, replace
from typing import Literal

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.definition import DEFAULT_PERSISTENT_GROUP as DEFAULT_PERSISTENT_GROUP  # the spec's too
from kprobe_tui.kernel.definition import MAX_EVENT_NAME_LEN as MAX_EVENT_NAME_LEN  # the spec's too
from kprobe_tui.kernel.tracefs import (
    KERNEL_SPACE_BYTE,
    MAX_COMMAND_LINE,
    MAX_FILTER_BYTES,
    control_character,
    describe_character,
)

__all__ = ["CompiledProbe", "DEFAULT_PERSISTENT_GROUP", "MAX_EVENT_NAME_LEN", "ProbeArg", "ProbeSpec", "TypeRefused",
           "parse_arg", "parse_spec"]

# Kernel limits (event and group names: kernel/definition.py). Argument names: refused when
# len > MAX_ARG_NAME_LEN.
MAX_ARG_NAME_LEN = 32
MAX_TRACE_ARGS = 128
MAX_FETCH_DEPTH = 8  # nested +OFF(...) dereferences we accept; the kernel has 16 fetch operations in all

PERF_DIALECT = "perf"

LOCALS_GONE = "local variables are gone when the function returns"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_TYPE = re.compile(r"[sux](8|16|32|64)")
# perf's x, u and s with no width: the width comes from the debug info (or is 64 for a register).
BARE_INT_TYPES = ("x", "u", "s")
_BITFIELD_TYPE = re.compile(r"b(\d+)@(\d+)/(8|16|32|64)", re.ASCII)
_ARRAY_TYPE = re.compile(r"(?P<base>[^\[\]]+)\[(?P<count>\d+)\]", re.ASCII)
_SCALAR_TYPES = {"char", "string", "ustring", "symbol", "symstr", "%pd", "%pD"}
_REGISTERS = {
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss", "ds", "es", "fs", "gs",
    *(f"r{n}" for n in range(8, 16)), "orig_ax",
}
# A C access path: identifier, then any of ->member, .member, [index].
# (Names may be any identifier C allows, café too: they are looked up in DWARF and BTF, never written as they are.)
_C_PATH = re.compile(r"[^\W\d]\w*(?:(?:->|\.)[^\W\d]\w*|\[\d+\])*")
_C_STEP = re.compile(r"->([^\W\d]\w*)|\.([^\W\d]\w*)|\[(\d+)\]")
# Raw fetch-args (kprobetrace.rst, uprobetracer.rst "FETCHARGS"), as the kernel's parse_probe_arg reads them.
_NUMBER = r"(?:0[xX][0-9a-fA-F]+|\d+)"
_DEREF = re.compile(rf"[+-]u?{_NUMBER}\((?P<inner>.*)\)", re.ASCII | re.S)  # +|-[u]OFFS(FETCHARG)
_IMMEDIATE = re.compile(rf"\\(?:[+-]?{_NUMBER}|\"[!$-~]*\")", re.ASCII)  # \IMM, \"STRING" (no '"', '#', space)
_MEMORY = re.compile(rf"@(?:{_NUMBER}|\+{_NUMBER}|[A-Za-z_.][\w.]*(?:[+-]{_NUMBER})?)", re.ASCII)  # @ADDR @+FOFFS @SYM+off
_SPECIAL = re.compile(r"\$(?:stack\d*|arg\d+|retval|comm)", re.ASCII)
_REGISTER = re.compile(r"%[A-Za-z0-9_]+")


@dataclass(frozen=True)
class AccessStep:
    """One step of a C access path after the variable: ``->f`` (through a pointer), ``.f``, ``[n]``."""

    op: str  # "->", ".", "[]"
    member: str = ""
    index: int = 0

    def __str__(self) -> str:
        return f"[{self.index}]" if self.op == "[]" else f"{self.op}{self.member}"


# What an argument is, so the compiler knows how to fetch it.
ArgKind = Literal["var", "retval", "params", "vars", "reg", "symbol", "argN", "comm", "raw"]
# Where a probe sits: a function's entry or return, a source line (also ;PTN), +OFF or 0xADDR, an fprobe.
ProbeKind = Literal["entry", "return", "line", "offset", "fprobe"]
_SPECIAL_ARGS: dict[str, ArgKind] = {"$retval": "retval", "$params": "params", "$vars": "vars", "$comm": "comm"}


@dataclass(frozen=True)
class ProbeArg:
    """One argument as written. ``kind`` tells the compiler what it is, ``text`` keeps the user's words."""

    text: str  # the expression as written, without NAME= and :TYPE
    kind: ArgKind
    name: str | None = None  # the user's NAME=, validated
    type: str | None = None  # the user's :TYPE, validated
    var: str = ""  # for "var": the variable; for "reg"/"symbol": register/symbol name
    path: tuple[AccessStep, ...] = ()
    index: int = 0  # for "argN"

    def __str__(self) -> str:
        named = f"{self.name}=" if self.name else ""
        typed = f":{self.type}" if self.type else ""
        return f"{named}{self.text}{typed}"


@dataclass(frozen=True)
class ProbeSpec:
    """A probe request: where (kernel function or ``-x BINARY`` place), what to capture, names, filter."""

    kind: ProbeKind
    function: str | None = None
    binary: str | None = None  # -x: a uprobe on this file; None: the kernel
    module: str | None = None  # -m: a kernel module (its name): the place is MODULE:func+off
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
    # Whose conventions default names and types follow: kprobe-tui's (``len=...:u32``, ``sk_state``) or,
    # for ``kprobe-tui probe`` as a drop-in for ``perf probe``, perf's (unsigned values as ``x32``,
    # ``flags_x`` for ``flags:x``, unnamed raw fetch-args named ``argN`` by position, untyped ``$retval``).
    dialect: str = "kprobe-tui"

    @property
    def perf_dialect(self) -> bool:
        return self.dialect == PERF_DIALECT

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


def _fail(token: str, why: str, hint: str, kind: type[UserError] = UserError) -> UserError:
    return kind(f"{token!r}: {why}", hint)


class TypeRefused(UserError):
    """A fetch-arg type the kernel does not know: well-formed, refused for what it names (perf finds it
    after parsing the command line, so its exit status differs from a syntax error's)."""


def check_text(text: str, what: str) -> str:
    """Refuse a control character (a newline above all) in anything typed: it would start a second command."""
    bad = control_character(text)
    if bad >= 0:
        raise UserError(f"{text!r}: {describe_character(text[bad])} in the {what} at column {bad + 1}",
                        "a probe is one line of tracefs: remove it")
    return text


def check_name(name: str, what: str, limit: int) -> str:
    """A group, event or argument name the kernel accepts, or a UserError naming it."""
    check_text(name, f"{what} name")
    if not name.isascii():
        raise _fail(name, f"not a valid {what} name: the kernel takes ASCII letters, digits and '_' only",
                    "spell it in ASCII, e.g. cafe for café")
    if not _NAME.fullmatch(name):
        raise _fail(name, f"not a valid {what} name", "use letters, digits and '_', not starting with a digit")
    if len(name) > limit:
        raise _fail(name, f"{what} name is {len(name)} characters, the kernel takes at most {limit}", "pick a shorter name")
    return name


def check_group(name: str, own: str | None = None) -> str:
    """A group a user may name: valid, and not a run-scoped name (``kptui_<pid>``: ``cleanup`` owns those).

    ``own`` is this run's group, which the builder offers for its run-scoped probes.
    """
    check_name(name, "group", MAX_EVENT_NAME_LEN)
    if lifetime.is_run_scoped(name) and name != own:
        raise _fail(name, "names like this are kprobe-tui's run-scoped groups, removed with their run or by cleanup",
                    "pick another group, e.g. kprobe_tui (the default) or a name of your own")
    return name


def uprobe_target(path: str) -> str:
    """The file a uprobe goes on, as written to tracefs: resolved (symlinks and ``..``, as the kernel
    would follow them) so the line names this very file, and only if a definition line can say it."""
    resolved = os.path.realpath(path)
    problem = _unsayable(resolved)
    if problem:
        shown = f"{path!r}" + (f" (resolved: {resolved!r})" if resolved != os.path.abspath(path) else "")
        raise UserError(f"{shown}: tracefs cannot name this file: its path holds {problem}",
                        "give the same file by a path without it: hard-link it (ln FILE /tmp/NAME: the same inode, so "
                        "the probe fires for every process running it) or bind-mount its directory")
    return resolved


def _unsayable(path: str) -> str | None:
    """What in a path a definition line cannot carry, in words; None when it can carry all of it."""
    bad = control_character(path)
    if bad >= 0:
        return describe_character(path[bad])
    if any(char.isspace() for char in path):
        return "whitespace, which ends a word of the definition line"
    if "#" in path:
        return "'#', after which the kernel reads the line as a comment"
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        return "bytes that are not UTF-8"
    if KERNEL_SPACE_BYTE in encoded:
        return "byte 0xa0 in its UTF-8, which the kernel's parser takes for a space"
    return None


def check_type(type_text: str) -> str:
    """A fetch-arg type the kernel knows (kprobetrace.rst "Types"), or a UserError naming it."""
    array = _ARRAY_TYPE.fullmatch(type_text)
    base = array["base"] if array else type_text
    if array and not 0 < int(array["count"]) <= 64:
        raise _fail(type_text, "array size must be 1..64", "e.g. :u8[16]")
    if _INT_TYPE.fullmatch(base) or base in _SCALAR_TYPES or (base in BARE_INT_TYPES and not array):
        return type_text
    bits = _BITFIELD_TYPE.fullmatch(base)
    if bits and not array:
        width, offset, container = (int(v) for v in bits.groups())
        if 0 < width and width + offset <= container:
            return type_text
        raise _fail(type_text, "bitfield does not fit in its container", "b<width>@<bit-offset>/<container-bits>")
    raise _fail(
        type_text,
        "unknown type",
        "use s8/16/32/64, u8/16/32/64, x8/16/32/64 (or s, u, x: the width from the debug info), char, string, "
        "ustring, symbol, b<w>@<o>/<c>, or <type>[N]",
        TypeRefused,
    )


def sized(wanted: str, natural: str | None) -> str:
    """A bare ``x``/``u``/``s`` given the width of the value's own type (``natural``: ``s32``, ``u8[4]``,
    a bitfield's ``b3@1/32``, or None for a register or raw memory, which are 64 bits wide), as perf does.
    Any other type is kept as written."""
    if wanted not in BARE_INT_TYPES:
        return wanted
    if natural is None:
        return f"{wanted}64"
    if natural.startswith("b") or not _INT_TYPE.match(natural):
        return natural  # a bitfield keeps its bits (perf too); a string or symbol has no width to borrow
    return wanted + natural[1:]


def _parse_number(token: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise _fail(token, f"{text!r} is not a number", "offsets and lines are decimal or 0x-hex") from None


def parse_arg(text: str) -> ProbeArg:
    """``[NAME=]EXPR[:TYPE]`` where EXPR is a C path, $retval/$params/$vars/$argN/$comm, %REG or @SYM."""
    token = check_text(text, "argument")
    name = type_ = None
    head = re.fullmatch(r"([^=()]+)=(.+)", text, re.S)
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
    if text in _SPECIAL_ARGS:
        return ProbeArg(text, _SPECIAL_ARGS[text])
    if re.fullmatch(r"\$arg\d+", text, re.ASCII):
        index = int(text[4:])
        if not 1 <= index <= MAX_TRACE_ARGS:
            raise _fail(token, "argument numbers start at 1", "$arg1 is the first parameter")
        return ProbeArg(text, "argN", index=index)
    if re.fullmatch(r"\$stack\d*", text, re.ASCII):
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
        sym = re.fullmatch(r"@([A-Za-z_.][\w.]*)([+-](?:0x[0-9a-fA-F]+|\d+))?", text, re.ASCII)
        if not sym:
            raise _fail(token, "not a symbol", "write @symbol or @symbol+offset")
        return ProbeArg(text, "symbol", var=sym[1], index=int(sym[2] or "0", 0))
    if text[0] in "+-\\":
        check_raw_fetch(token, text)
        return ProbeArg(text, "raw")  # a kernel fetch-arg written by hand, e.g. +8(%di)
    if not _C_PATH.fullmatch(text):
        raise _fail(token, "not a variable access", "write var, var->member, var.member or var[N]")
    leading = re.match(r"[^\W\d]\w*", text)
    assert leading is not None  # _C_PATH matched: the text starts with an identifier
    var = leading[0]
    path = tuple(
        AccessStep("->", m[1]) if m[1] else AccessStep(".", m[2]) if m[2] else AccessStep("[]", index=int(m[3]))
        for m in _C_STEP.finditer(text[len(var) :])
    )
    return ProbeArg(text, "var", var=var, path=path)


def check_raw_fetch(token: str, text: str, depth: int = 0) -> None:
    """A fetch-arg written for the kernel (``+8(%di)``, ``-u4(+0(%sp))``, ``\\1``, ``@sym+8``, ``$stack2``):
    exactly one, in the kernel's grammar, or a UserError. The kernel would take ``+0(%sp)junk`` (it
    reads up to the last ')') and a newline would end the definition: neither gets through."""
    deref = _DEREF.fullmatch(text)
    if deref and depth < MAX_FETCH_DEPTH:
        inner = deref["inner"]
        if inner.startswith(("+", "-")):
            check_raw_fetch(token, inner, depth + 1)
            return
        if _IMMEDIATE.fullmatch(inner) or _MEMORY.fullmatch(inner) or _SPECIAL.fullmatch(inner) or _REGISTER.fullmatch(inner):
            return  # which registers and symbols exist, the kernel says (with its caret)
        raise _fail(token, f"{inner!r} is no fetch-arg the kernel reads memory at",
                    "inside +OFF(...): %REG, @ADDR, @SYM, $stackN, $argN or another +OFF(...), e.g. +8(+0(%di))")
    if depth == 0 and _IMMEDIATE.fullmatch(text):
        return
    if deref:
        raise _fail(token, f"more than {MAX_FETCH_DEPTH} nested dereferences", "read fewer levels of pointers")
    raise _fail(token, "not a kernel fetch-arg", "raw fetch-args are +|-[u]OFF(FETCHARG) or \\IMM, e.g. +8(%di):u32, "
                "-4(%bp):s32, +0(+8(%si)):string, \\1")


_PLACE = re.compile(
    r"""^(?P<func>[A-Za-z_./][\w./-]*?)?        # FUNC or SRC
        (?:@(?P<src>[^:+%;\s]+))?               # @SRC
        (?::(?P<line>\d+))?                     # :RLN / :ALN
        (?:\+(?P<off>0x[0-9a-fA-F]+|\d+))?      # +OFF
        (?P<ret>%return)?
        (?:;(?P<lazy>.+))?\Z""",
    re.X,
)


def parse_spec(
    words: list[str] | str,
    *,
    binary: str | None = None,
    fprobe: bool = False,
    group: str | None = None,
    filter: str | None = None,
    module: str | None = None,
) -> ProbeSpec:
    """Parse ``[[GROUP:]EVENT=]PLACE [ARG ...]`` (perf probe's syntax; see ``perf-probe(1)``).

    ``group`` is the one the caller chose (``-g``, or this run's); a ``GROUP:`` typed in the spec
    may not be a run-scoped name. ``binary`` becomes the resolved path written to tracefs.
    ``module``: the function is in this kernel module (perf's -m), by its name.
    """
    if isinstance(words, str):
        try:
            words = shlex.split(words)
        except ValueError as exc:  # "No closing quotation", "No escaped character"
            raise UserError(f"{words!r}: {exc}", "close the quote, or quote the whole probe in the other kind of quote") from None
    if not words:
        raise UserError("no probe point given", "e.g. kprobe-tui probe 'do_sys_openat2 filename:string'")
    head, *arg_words = words
    check_text(head, "probe point")
    event = None
    named = re.fullmatch(r"(?:([^:=;]+):)?([^:=;]+)=([^;]+(?:;.*)?)", head, re.S)  # an ;PATTERN may hold '='
    if named:
        group = check_group(named[1]) if named[1] else group
        event, head = check_name(named[2], "event", MAX_EVENT_NAME_LEN), named[3]
    if group is not None:
        check_name(group, "group", MAX_EVENT_NAME_LEN)
    if filter:
        check_filter_text(filter)
    if binary is not None:
        binary = uprobe_target(binary)
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
    if module is not None and binary is not None:
        raise UserError("-m MODULE is for kernel modules: a uprobe (-x) names its file already", "give -x or -m, not both")
    return replace(spec, group=group, event=event, args=args, filter=filter or None, module=module)


def check_filter_text(text: str) -> str:
    """A filter the kernel can take in one write: no control character, at most MAX_FILTER_BYTES."""
    check_text(text, "filter")
    size = len(text.encode(errors="surrogatepass"))
    if size > MAX_FILTER_BYTES:
        raise UserError(f"the filter is {size} bytes: the kernel takes at most {MAX_FILTER_BYTES} in a filter file",
                        "write a shorter filter")
    return text


def _parse_place(head: str, binary: str | None, fprobe: bool) -> ProbeSpec:
    if re.fullmatch(r"0x[0-9a-fA-F]+(%return)?", head):
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
    if func and ("/" in func or re.search(r"\.(c|h|cc|cpp|S)\Z", func)) and not src:
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
    kind: ProbeKind = "return" if ret else "line" if line is not None or lazy else "offset" if offset else "entry"
    return ProbeSpec(kind, function=func, binary=binary, source=src, line=line, offset=offset, lazy=lazy)


@dataclass(frozen=True)
class FetchArg:
    """One compiled argument: what the kernel fetches (``+18(%di)``) and as what type."""

    name: str
    fetch: str
    type: str | None = None
    source: ProbeArg | None = None  # the argument as written, when there is one
    # Written without NAME= (as perf writes a raw fetch-arg): the kernel names it arg<position>, which
    # ``name`` is; the event is the same either way, the line is perf's.
    implicit_name: bool = False

    def render(self) -> str:
        named = "" if self.implicit_name else f"{self.name}="
        return named + self.fetch + (f":{self.type}" if self.type else "")


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

    @property
    def filter(self) -> str | None:
        return self.spec.filter

    @property
    def is_uprobe(self) -> bool:
        return self.spec.is_uprobe

    def definition(self) -> str:
        """The line written to tracefs (kprobetrace.rst / uprobetracer.rst / fprobetrace.rst)."""
        place = self.place + ("%return" if self.spec.kind == "fprobe" and self.spec.is_return else "")
        active = self.maxactive if self.prefix == "r" and self.maxactive and not self.spec.is_uprobe else ""
        words = [f"{self.prefix}{active}:{self.group}/{self.event}", place, *(a.render() for a in self.args)]
        return " ".join(words)

    def check(self) -> CompiledProbe:
        """Prove the definition is one line of words the kernel parses as meant, or a UserError.

        The parts come from many places (the user, ELF symbols, DWARF, BTF); whatever their source,
        a word holds no space, no '#' and no control character, names are what the kernel takes,
        and the line fits in one kernel write.
        """
        check_name(self.group, "group", MAX_EVENT_NAME_LEN)
        check_name(self.event, "event", MAX_EVENT_NAME_LEN)
        if self.spec.is_uprobe:
            path, _, offset = self.place.rpartition(":")
            if uprobe_target(path) != path or not re.fullmatch(r"0x[0-9a-f]+", offset):
                raise UserError(f"{self.place!r}: not a uprobe place (PATH:0xOFFSET)")
        elif not re.fullmatch(r"(?:(?:\w+:)?[A-Za-z_.][\w.]*(?:\+\d+)?|0x[0-9a-f]+)", self.place, re.ASCII):
            raise UserError(f"{self.place!r}: not a kernel probe place ([MODULE:]SYMBOL[+OFFSET] or 0xADDRESS)")
        for arg in self.args:
            check_name(arg.name, "argument", MAX_ARG_NAME_LEN)
            word = arg.render()
            if not re.fullmatch(r"[!-~]+", word) or "#" in word:
                raise UserError(f"{word!r}: not one word of plain ASCII without '#'", "a fetch-arg is one word")
        line = self.definition()
        if len(line) > MAX_COMMAND_LINE:
            raise UserError(f"{self.group}/{self.event}: the definition is {len(line)} characters, the kernel takes "
                            f"at most {MAX_COMMAND_LINE} in one line", "capture fewer or shorter arguments")
        return self
