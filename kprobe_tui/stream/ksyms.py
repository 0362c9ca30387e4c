"""Kernel addresses named as the kernel's text names them, from ``/proc/kallsyms``.

A kprobe's, kretprobe's or fprobe's line names its site (``trace_seq_print_sym``): ``func+0x0/0x1a0``
with the offset, ``func`` without, ``func+0x8/0x40 [module]`` in a module, ``0`` for a null address and
``0x%08lx`` for one no symbol holds; a ``symbol`` argument is printed ``%pS`` (``sprint_symbol``, the
unknown as ``0x%lx``). A reader of the binary records must redo that: the table is read once, when the
first such name is asked for (~200k lines: ~0.3 s here), and each address named is remembered.

As ``kallsyms_lookup``: the symbol is the one at or below the address (of several at one address, the
first listed), its size runs to the next symbol above it.
"""

from __future__ import annotations

import bisect

from kprobe_tui.errors import UserError

KALLSYMS = "/proc/kallsyms"
KRETPROBE_TRAMPOLINES = frozenset({"__kretprobe_trampoline", "kretprobe_trampoline"})


class KernelSymbols:
    """``site(address, offset)`` and ``pointer(address)`` as the text prints them."""

    def __init__(self, path: str = KALLSYMS) -> None:
        self.path = path
        self._addresses: list[int] = []
        self._symbols: list[tuple[str, str]] = []  # (name, module) at each address, in the same order
        self._loaded = False
        self._named: dict[tuple[int, bool], str | None] = {}

    def check(self) -> None:
        """UserError unless the table shows addresses (a user the kernel hides them from sees zeros). The first
        function's is looked at: per-CPU symbols (``A``) start at 0 on x86-64 whoever reads them."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as table:
                first = next((line for line in table if line.split(" ", 2)[1:2] in (["T"], ["t"])), "0")
        except OSError as exc:
            raise UserError(f"cannot read {self.path}: {exc.strerror}", "run as root") from exc
        if not first.split(" ", 1)[0].strip("0"):
            raise UserError(f"{self.path} shows no addresses (kptr_restrict)", "run as root")

    def site(self, address: int, offset: bool) -> str:
        """A probe's site as ``seq_print_ip_sym`` prints it (with ``func+off/size`` or just ``func``)."""
        if not address:
            return "0"
        name = self._name(address, offset)
        return name if name is not None else f"0x{address:08x}"

    def pointer(self, address: int) -> str:
        """A ``symbol`` argument as ``%pS`` prints it."""
        name = self._name(address, True)
        return name if name is not None else f"0x{address:x}"

    def _name(self, address: int, offset: bool) -> str | None:
        key = (address, offset)
        if key not in self._named:
            self._named[key] = self._lookup(address, offset)
        return self._named[key]

    def _lookup(self, address: int, offset: bool) -> str | None:
        if not self._loaded:
            self._load()
        at = bisect.bisect_right(self._addresses, address) - 1
        if at < 0:
            return None
        start = self._addresses[at]
        at = bisect.bisect_left(self._addresses, start)  # the first listed of the symbols at this address
        name, module = self._symbols[at]
        if name in KRETPROBE_TRAMPOLINES:
            return "[unknown/kretprobe'd]"
        if not offset:
            return name
        after = bisect.bisect_right(self._addresses, start)
        size = self._addresses[after] - start if after < len(self._addresses) else 0
        return f"{name}+{address - start:#x}/{size:#x}" + (f" [{module}]" if module else "")

    def _load(self) -> None:
        """The table sorted by address (a stable sort: of symbols at one address, the first listed stays first),
        less what ``kallsyms_lookup`` never finds: absolute and per-CPU symbols, below the kernel's text."""
        self._loaded = True
        rows = []
        try:
            with open(self.path, encoding="utf-8", errors="replace") as table:
                for line in table:
                    address, _, rest = line.partition(" ")
                    kind, _, name_and_module = rest.rstrip("\n").partition(" ")
                    name, _, module = name_and_module.partition("\t")
                    try:
                        rows.append((int(address, 16), kind, name, module.strip("[]")))
                    except ValueError:
                        continue  # not a line of the table: its addresses are what matter
        except OSError:
            return  # every address is then printed as a number, as the kernel does without kallsyms
        text = min((row[0] for row in rows if row[1] in ("T", "t")), default=0)
        rows = sorted((row for row in rows if row[0] >= text and row[1] not in ("A", "a")), key=lambda row: row[0])
        self._addresses = [row[0] for row in rows]
        self._symbols = [(row[2], row[3]) for row in rows]
