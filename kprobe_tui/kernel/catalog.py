"""Every kernel function, whether it can be probed, and why (not).

The catalog is the union of ``/proc/kallsyms`` text symbols, ``available_filter_functions`` and the
kprobe blacklist, with prototypes from BTF. It is built for 100k+ names: the build only parses
(names sorted once, sets and dicts for lookups); each function's status, reason, size and
prototype are worked out when someone looks at it, and cached.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, NoSuchFile, read_regular
from kprobe_tui.kernel.sources import KernelSources
from kprobe_tui.matching import Matcher


class Status(str, Enum):
    FTRACE = "ftrace"  # probeable, attaches through ftrace
    BREAKPOINT = "breakpoint"  # probeable, but only with an int3 breakpoint (notrace)
    PROBEABLE = "probeable"  # probeable; ftrace list unreadable, attach method unknown
    CLONE = "clone"  # a compiler-made copy of a source function
    AMBIGUOUS = "ambiguous"  # several symbols share the name
    BLACKLISTED = "blacklisted"  # the kernel refuses to probe it
    HIDDEN = "hidden"  # not enough information to tell
    FREED = "freed"  # __init code: the kernel freed it after boot
    NO_KPROBES = "no-kprobes"  # the kernel was built without kprobes: nothing of it can be probed

    @property
    def probeable(self) -> bool:
        return self in (Status.FTRACE, Status.BREAKPOINT, Status.PROBEABLE, Status.CLONE)

    @property
    def refused(self) -> bool:
        """A probe asked for by this name fails whatever it says: refused before the kernel is asked."""
        return self in (Status.BLACKLISTED, Status.AMBIGUOUS, Status.FREED, Status.NO_KPROBES)


STATUS_HELP = {
    Status.FTRACE: "probeable through ftrace (cheapest)",
    Status.BREAKPOINT: "probeable by breakpoint only (notrace: more overhead)",
    Status.PROBEABLE: "probeable (ftrace list unreadable)",
    Status.CLONE: "compiler clone (.isra/.constprop/.part/.cold)",
    Status.AMBIGUOUS: "ambiguous: several symbols share the name",
    Status.BLACKLISTED: "blacklisted: the kernel refuses it",
    Status.HIDDEN: "unknown: addresses or lists hidden",
    Status.FREED: "freed: __init code, gone after boot",
    Status.NO_KPROBES: "no kprobes: this kernel cannot probe it",
}

_HEX = frozenset("0123456789abcdefABCDEF")
# kallsyms types of functions: t/T, and w/W for __weak ones (abort, arch hooks); weak data is v/V.
_TEXT_KINDS = "tTwW"
_KALLSYMS_LINE = re.compile(r"^([0-9a-fA-F]+) ([A-Za-z]) (\S+)(?:[ \t]+\[([^\]\s]+)\])?[ \t]*$", re.M)

# Padding (CONFIG_CALL_PADDING) and CFI stubs sit before functions in kallsyms; they are not functions.
_NOT_FUNCTIONS = ("__pfx_", "__cfi_")
# Bounds on what a kernel list can be (a file named on the command line may be anything): a distribution
# kernel's /proc/kallsyms with modules is ~15 MB, its ftrace list and blacklist a few MB.
MAX_KALLSYMS = 256 * MiB
MAX_LIST_FILE = 64 * MiB

_CLONE_SUFFIX = re.compile(r"\.(isra|constprop|part|cold|lto_priv|llvm)(\.\d+)?")
_CLONE_MEANING = {
    "isra": "GCC's IPA-SRA copy: parameters may be dropped or passed differently, so arguments do not "
    "match {base}'s prototype, and only calls routed to this copy are seen",
    "constprop": "a constant-propagated copy: some arguments are fixed and removed, and only the "
    "callers specialised to those constants are seen",
    "part": "the out-of-line part of a partially inlined {base}: it runs only on some paths through {base}",
    "cold": "the cold (unlikely) path of {base}, split out by the compiler: it sees error paths, not entries",
    "lto_priv": "a copy made private by link-time optimisation",
    "llvm": "a copy made by LLVM's optimiser (e.g. a suffix for a localised symbol)",
}


def source_function(name: str) -> str:
    """The function a compiler clone was made from (``foo.constprop.0`` -> ``foo``): whose source to show."""
    clone = _CLONE_SUFFIX.search(name)
    return name[: clone.start()] if clone else name


def clone_reason(name: str) -> str | None:
    """What probing a compiler clone means, for kernel and user functions alike; None if not a clone."""
    clone = _CLONE_SUFFIX.search(name)
    if not clone:
        return None
    base = name[: clone.start()]
    return f"compiler clone of {base}(): {_CLONE_MEANING[clone.group(1)].format(base=base)}"


@dataclass(frozen=True)
class Symbol:
    address: int
    module: str  # "" for the core kernel


@dataclass(frozen=True)
class Function:
    """What the detail pane and ``funcs --json`` show about one name."""

    name: str
    module: str
    symbols: tuple[Symbol, ...]
    size: int | None
    status: Status
    reason: str
    prototype: str | None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "module": self.module or None,
            "address": f"0x{self.symbols[0].address:x}" if self.symbols and self.symbols[0].address else None,
            "addresses": [f"0x{s.address:x}" for s in self.symbols],
            "size": self.size,
            "status": self.status.value,
            "probeable": self.status.probeable,
            "reason": self.reason,
            "prototype": self.prototype,
        }


@runtime_checkable
class FunctionCatalog(Protocol):
    """What the function browser and the probe pipeline ask of a list of functions: the kernel's
    (``Catalog``) or a user binary's (``probes.binary.BinaryCatalog``), each saying it its own way."""

    names: list[str]  # sorted
    notes: list[str]  # what is missing and why, for the user
    details_ready: bool  # warm() has run: function() answers without loading anything
    labels: Mapping[Status, str]  # each status in this catalog's words, in the legend's order
    missing_prototype: str  # what the detail pane says when a function has no prototype
    function: Callable[[str], Function]

    def __len__(self) -> int: ...
    def status(self, name: str) -> Status: ...
    def classify(self, name: str) -> tuple[Status, str]: ...
    def module(self, name: str) -> str: ...
    def where(self, function: Function) -> str: ...
    def warm(self) -> None: ...


def _init_text_bounds(kallsyms: str) -> tuple[int, int] | None:
    """Where the core kernel's __init code was, from its kallsyms markers (None when either is missing or hidden)."""
    bounds = []
    for marker in ("_sinittext", "_einittext"):
        at = next((found for kind in "Tt" if (found := kallsyms.find(f" {kind} {marker}\n")) >= 0), -1)
        address = kallsyms[kallsyms.rfind("\n", 0, at) + 1 : at] if at >= 0 else ""
        if not address or not all(c in _HEX for c in address):
            return None
        bounds.append(int(address, 16))
    low, high = bounds
    return (low, high) if 0 < low < high else None


def _read_lines(path: Path | None, what: str, notes: list[str]) -> list[str] | None:
    """A file's lines, or None with a note naming the file and the reason."""
    if path is None:
        notes.append(f"{what}: not available (its filesystem is not mounted)")
        return None
    try:
        return read_regular(path, what, MAX_LIST_FILE).decode(errors="replace").splitlines()
    except NoSuchFile:
        return None
    except UserError as exc:
        notes.append(exc.message)
        return None


class Catalog:
    """Names sorted for browsing; per-name facts looked up on demand and cached.

    ``matching``: only the names a Matcher (glob or substring) takes, which is what ``funcs PATTERN`` and
    ``probe`` need: the kernel's files are then scanned for those names alone (a regex that starts with a
    literal runs ~15x faster over kallsyms than parsing its 120k lines), and sizes are not known.
    ``attach_methods``: read available_filter_functions to tell ftrace from breakpoint-only functions
    (both probeable; without it they are PROBEABLE), which a list of probeable names does not need.
    """

    labels: Mapping[Status, str] = {status: status.value for status in (
        Status.FTRACE, Status.BREAKPOINT, Status.PROBEABLE, Status.CLONE, Status.AMBIGUOUS, Status.BLACKLISTED,
        Status.HIDDEN, Status.FREED)}
    missing_prototype = "(no prototype: not in BTF)"

    def __init__(self, sources: KernelSources, matching: Matcher | None = None, attach_methods: bool = True) -> None:
        self.sources = sources
        self._name_regex = matching.name_regex() if matching is not None and matching.query else None
        self._name_flags = re.IGNORECASE if matching is not None and matching.ignore_case else 0
        self.notes: list[str] = []
        self.garbage_lines = 0
        self._symbols: dict[str, list[tuple[str, str]]] = {}  # name -> [(hex address, module)]
        self._padding_addresses: list[str] = []  # where padding before a function starts (hex)
        self._ftrace: dict[str, str] | None = None  # name -> module
        self._blacklist_names: set[str] = set()
        self._blacklist_ranges: list[tuple[int, int, str]] = []
        self._addresses_hidden = False
        self._init_text: tuple[int, int] | None = None  # [_sinittext, _einittext): the core kernel's __init code
        self._btf_loaded = False
        self._btf = None
        self._module_btf: dict[str, object] = {}
        tracefs = sources.tracefs
        self.without_kprobes = tracefs is not None and os.access(tracefs, os.X_OK) and \
            not os.path.exists(tracefs / "kprobe_events")
        if self.without_kprobes:  # no status says probeable: the legend says why
            self.labels = {Status.NO_KPROBES: "no kprobes in this kernel", Status.AMBIGUOUS: "ambiguous",
                           Status.HIDDEN: "hidden", Status.FREED: "freed"}
            self.notes.append("this kernel has no kprobe_events (built without CONFIG_KPROBES): no kernel function "
                              "can be probed here; uprobes work (kprobe-tui -x PROGRAM)")
        self._load_kallsyms()
        # Whether addresses are hidden decides whether a function's status can be told without the
        # ftrace list (HIDDEN): then it is read whatever was asked.
        if attach_methods or self._addresses_hidden:
            self._load_ftrace()
        self._load_blacklist()
        names = set(self._symbols)
        if self._ftrace:
            names.update(self._ftrace)
        self.names: list[str] = sorted(names)
        self._text_addresses: list[int] | None = None
        self._classified: dict[str, tuple[Status, str]] = {}
        self.details_ready = False  # set by warm(): function() no longer loads BTF or sorts addresses
        self.function = lru_cache(maxsize=4096)(self._function)

    # --- building ---------------------------------------------------------------------------

    def _load_kallsyms(self) -> None:
        # One regex pass in C over the whole file; addresses stay hex text until someone looks.
        try:
            text = read_regular(self.sources.kallsyms, "kallsyms", MAX_KALLSYMS).decode(errors="replace")
        except UserError as exc:
            self.notes.append(exc.message)
            return
        self._init_text = _init_text_bounds(text)
        if self._name_regex is not None:
            rows = self._matching_rows(text)
        else:
            rows = _KALLSYMS_LINE.findall(text)
            self.garbage_lines = text.count("\n") + (not text.endswith("\n") and bool(text)) - len(rows)
        symbols = self._symbols
        padding = self._padding_addresses
        for address, kind, name, module in rows:
            if kind not in _TEXT_KINDS:
                continue
            if name.startswith(_NOT_FUNCTIONS):
                padding.append(address)
                continue
            found = symbols.get(name)
            if found is None:
                symbols[name] = [(address, module)]
            else:
                found.append((address, module))
        nonzero = any(address.strip("0") for address, _, _, _ in rows[:100])
        if symbols and not nonzero:
            self._addresses_hidden = True
            self.notes.append(
                f"{self.sources.kallsyms} shows only zero addresses (kptr_restrict, or not root): "
                "sizes and blacklist ranges are unknown"
            )
        if self.garbage_lines:
            self.notes.append(f"kallsyms: skipped {self.garbage_lines} malformed line(s)")

    def _matching_rows(self, text: str) -> list[tuple[str, str, str, str]]:
        """kallsyms rows (address, kind, name, module) of text symbols whose names match, found from the
        literal ``" t "`` before a name; each row's address is checked to be the whole start of its line."""
        pattern = re.compile(rf" ([{_TEXT_KINDS}]) ({self._name_regex})(?:[ \t]+\[([^\]\s]+)\])?[ \t]*$", re.M | self._name_flags)
        rows = []
        for match in pattern.finditer(text):
            start = text.rfind("\n", 0, match.start()) + 1
            address = text[start : match.start()]
            if address and all(c in _HEX for c in address):
                rows.append((address, match[1], match[2], match[3] or ""))
        return rows

    def _load_ftrace(self) -> None:
        tracefs = self.sources.tracefs
        path = tracefs / "available_filter_functions" if tracefs else None
        why: list[str] = []
        lines = _read_lines(path, "available_filter_functions", why)
        if lines is None:
            self.notes.append(
                f"{why[0] if why else 'available_filter_functions: not present'}; falling back to "
                f"{self.sources.kallsyms}, so ftrace-able functions cannot be told from breakpoint-only ones"
            )
            return
        ftrace: dict[str, str] = {}
        if self._name_regex is not None:
            wanted = re.compile(rf"({self._name_regex})(?:[ \t]|\Z)", self._name_flags)
            lines = [line for line in lines if wanted.match(line)]
        for line in lines:
            name, _, rest = line.partition(" ")
            if name:
                ftrace[name] = rest.strip().strip("[]")
        self._ftrace = ftrace

    def _load_blacklist(self) -> None:
        lines = _read_lines(self.sources.blacklist, "kprobe blacklist", self.notes)
        if lines is None:
            return
        bad = 0
        for line in lines:
            span, _, name = line.partition("\t")
            start, _, end = span.partition("-")
            try:
                low, high = int(start, 16), int(end, 16)
            except ValueError:
                bad += 1
                continue
            name = name.strip()
            if name:
                self._blacklist_names.add(name)
            if high > low:
                self._blacklist_ranges.append((low, high, name))
        self._blacklist_ranges.sort()
        if bad:
            self.notes.append(f"kprobe blacklist: skipped {bad} malformed line(s)")

    # --- per-function facts -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.names)

    def status(self, name: str) -> Status:
        return self.classify(name)[0]

    def classify(self, name: str) -> tuple[Status, str]:
        """Status and reason, cached: the browser colours every visible row with it."""
        found = self._classified.get(name)
        if found is None:
            found = self._classified[name] = self._classify(name, self._symbols_of(name))
        return found

    def where(self, function: Function) -> str:
        """Where the detail pane says a function lives."""
        return f"module {function.module}" if function.module else "core kernel"

    def module(self, name: str) -> str:
        symbols = self._symbols.get(name)
        return symbols[0][1] if symbols else (self._ftrace or {}).get(name, "")

    def symbol_modules(self, name: str) -> list[str]:
        """The module of each kallsyms text symbol of this name ("" for the core kernel), one per symbol."""
        return [module for _, module in self._symbols.get(name, ())]

    def _symbols_of(self, name: str) -> tuple[Symbol, ...]:
        return tuple(Symbol(int(address, 16), module) for address, module in self._symbols.get(name, ()))

    def _function(self, name: str) -> Function:
        symbols = self._symbols_of(name)
        module = self.module(name)
        status, reason = self.classify(name)
        return Function(name, module, symbols, self._size(symbols), status, reason, self.prototype(name, module))

    def _classify(self, name: str, symbols: tuple[Symbol, ...]) -> tuple[Status, str]:
        status, reason = self._classify_symbol(name, symbols)
        if self.without_kprobes and status.probeable:
            return Status.NO_KPROBES, (
                "this kernel was built without kprobes (no kprobe_events in tracefs): it cannot be probed here; "
                f"uprobes can (kprobe-tui -x PROGRAM). With kprobes: {reason}"
            )
        return status, reason

    def _classify_symbol(self, name: str, symbols: tuple[Symbol, ...]) -> tuple[Status, str]:
        init = self._init_text
        if init and symbols and all(not s.module and init[0] <= s.address < init[1] for s in symbols):
            return Status.FREED, (
                f"__init code (between _sinittext 0x{init[0]:x} and _einittext 0x{init[1]:x}): the kernel ran it "
                "during boot and freed it, so there is nothing left to probe (perf probe leaves it out too)"
            )
        blacklisted_by = self._blacklisted_by(name, symbols)
        if blacklisted_by:
            return Status.BLACKLISTED, (
                f"in the kprobe blacklist ({blacklisted_by}): the kernel refuses to probe it, "
                "because a probe there could recurse into the probe handler or crash"
            )
        if len(symbols) > 1:
            where = ", ".join(
                (f"0x{s.address:x}" if s.address else "address hidden") + (f" [{s.module}]" if s.module else "")
                for s in symbols
            )
            return Status.AMBIGUOUS, (
                f"{len(symbols)} symbols share this name ({where}); kernels since 6.7 refuse an ambiguous "
                "name: probe one by address, or by MODULE:name when they are in different modules"
            )
        clone = clone_reason(name)
        if clone:
            return Status.CLONE, clone
        in_ftrace = self._ftrace is not None and name in self._ftrace
        if in_ftrace:
            return Status.FTRACE, "in available_filter_functions: kprobes attach through ftrace (cheapest)"
        if self._ftrace is not None:
            return Status.BREAKPOINT, (
                "not in available_filter_functions (notrace, or too early/late to patch): "
                "a kprobe still works, through an int3 breakpoint with more overhead"
            )
        if self._addresses_hidden and not self._blacklist_ranges and self.sources.blacklist is None:
            return Status.HIDDEN, (
                "addresses are hidden and available_filter_functions is unreadable: "
                "whether the kernel accepts a probe here cannot be told"
            )
        return Status.PROBEABLE, (
            "in /proc/kallsyms; available_filter_functions is unreadable, so whether it attaches "
            "through ftrace or a breakpoint is unknown"
        )

    def _blacklisted_by(self, name: str, symbols: tuple[Symbol, ...]) -> str:
        if name in self._blacklist_names:
            return "by name"
        ranges = self._blacklist_ranges
        for symbol in symbols:
            if not symbol.address or not ranges:
                continue
            i = bisect.bisect_right(ranges, (symbol.address, float("inf"), "")) - 1
            if i >= 0 and ranges[i][0] <= symbol.address < ranges[i][1]:
                low, high, owner = ranges[i]
                return f"inside {owner} 0x{low:x}-0x{high:x}"
        return ""

    def _size(self, symbols: tuple[Symbol, ...]) -> int | None:
        """Distance to the next text symbol: kallsyms has no sizes, the next symbol bounds this one."""
        if len(symbols) != 1 or not symbols[0].address:
            return None
        if self._text_addresses is None:
            self._text_addresses = self._all_text_addresses()
        addresses = self._text_addresses
        i = bisect.bisect_right(addresses, symbols[0].address)
        return addresses[i] - symbols[0].address if i < len(addresses) else None

    def _all_text_addresses(self) -> list[int]:
        # Padding symbols count here: they mark where the previous function ends.
        found = {int(address, 16) for address in self._padding_addresses}
        found.update(int(address, 16) for symbols in self._symbols.values() for address, _ in symbols)
        return sorted(found)

    def warm(self) -> None:
        """Load what ``function()`` needs beyond names (BTF, sorted addresses); for a background thread."""
        self._btf_for("")
        if self._text_addresses is None:
            self._text_addresses = self._all_text_addresses()
        self.details_ready = True

    # --- prototypes -------------------------------------------------------------------------

    def prototype(self, name: str, module: str = "") -> str | None:
        """The C prototype from BTF (the module's own BTF for module functions), or None."""
        btf = self._btf_for(module)
        return btf.prototype(name) if btf is not None else None

    def _btf_for(self, module: str):
        from kprobe_tui.kernel.btf import Btf  # imported late: most catalog users never need BTF

        if not self._btf_loaded:
            self._btf_loaded = True
            self._btf = self._load_btf(Btf, self.sources.btf_vmlinux, None)
        if not module or self._btf is None:
            return self._btf
        if module not in self._module_btf:
            self._module_btf[module] = self._load_btf(Btf, self.sources.btf_dir / module, self._btf)
        return self._module_btf[module]

    def _load_btf(self, btf_class, path: Path, base):
        if not path.exists():
            return None
        try:
            return btf_class.load(path, base=base)
        except UserError as exc:
            self.notes.append(f"BTF: {exc.message}")
            return None

    # --- queries ----------------------------------------------------------------------------

    def probeable_names(self) -> list[str]:
        return [name for name in self.names if self.status(name).probeable]
