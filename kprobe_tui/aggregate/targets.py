"""From the command line's SPECs to the probes of one run: globs expanded, the refused ones named.

A SPEC is what ``kprobe-tui probe`` takes (perf syntax, one shell word: ``'tcp_sendmsg size'``)
and is compiled by the same compiler. What the aggregation reads is captured too: the histogram's
field, ``--by`` arguments and the filter's arguments, each once. A glob (``'vfs_*'``, or
``-x BIN 'work*'``) becomes one entry probe per probeable function, like bcc's funccount: only
functions ftrace can attach to (a glob over breakpoint-only, notrace functions would put int3s on
hot paths nobody asked for by name), never blacklisted or ambiguous ones, and at most
``max_probes``; what is left out is said, with how many and why.
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from kprobe_tui.aggregate.model import Aggregation
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes.compile import compile_spec, running_kernel_vmlinux
from kprobe_tui.probes.pipeline import check_kernel_function
from kprobe_tui.probes.render import default_arg_name
from kprobe_tui.probes.spec import CompiledProbe, ProbeArg, ProbeSpec, parse_arg, parse_spec
from kprobe_tui.stream import filterexpr
from kprobe_tui.stream.parser import HEADER_FIELDS

__all__ = ["DEFAULT_MAX_PROBES", "TargetBuilder", "Targets", "argument_name", "run_builder"]

GLOB_CHARACTERS = "*?["
# The comm at the hit, captured by the probe: the comm a trace line shows is looked up when the line is
# printed (the last one saved for that pid), and a hist table's common_pid.execname is the comm when
# the pid's entry was made; a thread that renames itself would be counted under its old name.
COMM_ARGUMENT = "kptui_comm"
# A uprobe at a function's entry, counted by stack, captures the return address on top of the stack: the
# kernel's walk of the user stack starts at the caller's frame (the function has not made its own yet),
# so the caller itself is missing from it.
CALLER_ARGUMENT = "kptui_caller"
# bcc's funccount refuses more than 1000 probes; each kprobe costs a registration and every hit a trap.
DEFAULT_MAX_PROBES = 1000
# Calls a kretprobe can follow at once (the kernel's most, KRETPROBE_MAXACTIVE_MAX). Its default (10, or
# twice the CPUs) is used up by threads asleep in the function: in the 6.1 guest, a few pipe readers
# blocked in vfs_read made a kretprobe on it miss 23 of 25 returns of another process. The cost is
# about 100 bytes a slot.
RETURN_MAXACTIVE = 4096


@dataclass(frozen=True)
class Target:
    probes: tuple[CompiledProbe, ...]  # one event: several where a line has several addresses
    label: str  # the function, as the probe key shows it
    role: str = "hit"  # hit, entry, return

    @property
    def probe(self) -> CompiledProbe:
        return self.probes[0]

    @property
    def group(self) -> str:
        return self.probe.group

    @property
    def event(self) -> str:
        return self.probe.event


@dataclass
class Targets:
    items: list[Target]
    arguments: dict[str, str]  # model field name -> the argument's name in the event
    skipped: dict[str, list[str]] = field(default_factory=dict)  # why -> functions left out of a glob
    globbed: bool = False

    @property
    def uprobes(self) -> bool:
        return any(target.probe.spec.is_uprobe for target in self.items)

    def skip(self, why: str, name: str) -> None:
        self.skipped.setdefault(why, []).append(name)


def filter_arguments(filter_text: str) -> list[str]:
    """The argument names a filter compares (header fields are in every event)."""
    if not filter_text:
        return []
    names: list[str] = []

    def walk(node) -> None:
        if isinstance(node, filterexpr.Compare):
            if node.field not in HEADER_FIELDS and node.field not in names:
                names.append(node.field)
        elif isinstance(node, filterexpr.BoolOp):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, filterexpr.Not):
            walk(node.operand)

    walk(filterexpr.parse(filter_text))
    return names


def argument_name(arg: ProbeArg) -> str:
    """The field an argument becomes in the event: its NAME=, or the name the compiler gives it."""
    return arg.name or default_arg_name(arg)


def _words(spec_text: str) -> list[str]:
    try:
        words = shlex.split(spec_text)
    except ValueError as exc:
        raise UserError(f"{spec_text!r}: {exc}", "quote the SPEC as one shell word: 'FUNC ARG...'") from None
    if not words:
        raise UserError("an empty SPEC", "e.g. 'tcp_sendmsg size' or 'vfs_*'")
    return words


def run_builder(kernel, binary: str | None = None, max_probes: int = DEFAULT_MAX_PROBES) -> tuple[Tracefs, TargetBuilder]:
    """This run's tracefs and the builder of its targets (in this run's group, the names already there
    taken): the one way ``count``, ``hist``, ``latency`` and the statistics view start."""
    top = kernel.tracing()
    group = lifetime.run_name()
    return top, TargetBuilder(kernel, top.read("README") if top.exists("README") else "", group, binary=binary,
                              max_probes=max_probes, taken=[event.event for event in Events(top).events_in(group)])


class TargetBuilder:
    """Compiles SPECs for one run: ``kernel`` sources, ``readme`` (tracefs README), ``binary`` (-x)."""

    def __init__(self, kernel, readme: str, group: str, binary: str | None = None,
                 max_probes: int = DEFAULT_MAX_PROBES, taken: list[str] | None = None) -> None:
        """``taken``: event names already in ``group`` (a name used twice would append a probe to that event)."""
        self.kernel = kernel
        self.readme = readme
        self.group = group
        self.binary = str(Path(binary).resolve()) if binary else None
        self.max_probes = max_probes
        self.caller = False  # capture a uprobe's return address (counting by stack)
        self.taken: list[str] = list(taken or [])
        self._catalog = None

    # -- what each command asks for --------------------------------------------------------------

    def counting(self, specs: list[str], aggregation: Aggregation, filter_text: str, stacks: bool = False) -> Targets:
        """``stacks``: counted by stack, so a uprobe's caller is captured (``CALLER_ARGUMENT``)."""
        wanted = aggregation.arguments() + [n for n in filter_arguments(filter_text) if n not in aggregation.arguments()]
        targets = Targets([], {})
        comm = any(key.name == "comm" for key in aggregation.keys)
        self.caller = stacks and self.binary is not None
        for text in specs:
            words = _words(text)
            if any(c in words[0] for c in GLOB_CHARACTERS):
                if len(words) > 1 or wanted:
                    raise UserError(f"{text!r}: a glob counts calls; arguments come from one function",
                                    "name the function to capture its arguments, or key by comm/pid/probe")
                self._expand(words[0], targets, comm)
                targets.globbed = True
            else:
                self._single(words, wanted, targets, "hit", comm)
        if not targets.items:
            reasons = "; ".join(f"{len(names)} {why}" for why, names in targets.skipped.items())
            raise UserError(f"no probeable function matches {' '.join(specs)}" + (f" ({reasons})" if reasons else ""),
                            "list them with: kprobe-tui funcs" + (f" -x {self.binary}" if self.binary else "") + " 'PATTERN'")
        return targets

    def histogram(self, spec: str, value: str, aggregation: Aggregation, filter_text: str, stacks: bool = False) -> Targets:
        """``stacks``: one histogram a stack, so a uprobe's caller is captured (``CALLER_ARGUMENT``)."""
        words = _words(spec)
        if any(c in words[0] for c in GLOB_CHARACTERS):
            raise UserError(f"{spec!r}: a histogram is of one function's value", "name one function")
        others = aggregation.arguments()[1:] + filter_arguments(filter_text)
        targets = Targets([], {})
        comm = any(key.name == "comm" for key in aggregation.keys)
        self.caller = stacks and self.binary is not None
        value_name = argument_name(parse_arg(value))
        self._single(words + [value], list(dict.fromkeys([value_name, *others])), targets, "hit", comm)
        return targets

    def latency(self, function: str, aggregation: Aggregation, filter_text: str, stacks: bool = False) -> Targets:
        """Entry and return probes; by comm, the return captures it (it is read there, by either engine).
        ``stacks``: keyed by the entry's stack, so a uprobe's entry captures its caller (``CALLER_ARGUMENT``)."""
        words = _words(function)
        if len(words) != 1 or any(c in words[0] for c in GLOB_CHARACTERS + "%:+;"):
            raise UserError(f"{function!r}: latency is of one function, entry to return",
                            "give its name, e.g. vfs_read (or -x BIN work)")
        comm = any(key.name == "comm" for key in aggregation.keys)
        targets = Targets([], {})
        self.caller = stacks and self.binary is not None
        self._single(words, filter_arguments(filter_text), targets, "entry")
        self._single([f"{words[0]}%return"], [], targets, "return", comm)
        return targets

    # -- compiling --------------------------------------------------------------------------------

    def _single(self, words: list[str], wanted: list[str], targets: Targets, role: str, comm: bool = False) -> None:
        """One probe capturing what the run reads (``wanted``, and the comm) and nothing else: an argument
        the SPEC names but the run does not read is dropped (the kernel records less, and a histogram by
        comm reads its lines 1.4x as fast without one argument between the value and the comm, measured)."""
        spec = parse_spec(words, binary=self.binary, group=self.group)
        kept = [arg for arg in spec.args if argument_name(arg) in wanted]
        named = {argument_name(arg) for arg in kept}
        added = [parse_arg(name) for name in wanted if name not in named]
        if comm:
            added.append(parse_arg(f"{COMM_ARGUMENT}=$comm"))
            targets.arguments["comm"] = COMM_ARGUMENT
        if self.caller and spec.kind == "entry":
            added.append(parse_arg(f"{CALLER_ARGUMENT}=$stack0:x64"))
        if added or len(kept) != len(spec.args):
            spec = parse_spec(words[:1] + [str(arg) for arg in kept + added], binary=self.binary, group=self.group)
        if not spec.is_uprobe and spec.function:
            check_kernel_function(spec.function, self._load_catalog())
        for probes in self._compile(spec):
            for fetch in probes[0].args:
                if fetch.source is not None and fetch.name not in (COMM_ARGUMENT, CALLER_ARGUMENT):  # ours, no user's
                    targets.arguments.setdefault(argument_name(fetch.source), fetch.name)
            targets.items.append(Target(probes, spec.function or spec.place_text(), role))

    def _compile(self, spec: ProbeSpec) -> list[tuple[CompiledProbe, ...]]:
        """The spec's probes, by event: a line of several addresses is one event, hit at any of them."""
        vmlinux = running_kernel_vmlinux(spec) if self.kernel.live else None
        probes = compile_spec(spec, self.group, self.taken, readme=self.readme, btf_path=self.kernel.btf_vmlinux,
                              vmlinux=vmlinux)
        if spec.is_return and not spec.is_uprobe:
            probes = [replace(probe, maxactive=RETURN_MAXACTIVE) for probe in probes]
        events: dict[str, list[CompiledProbe]] = {}
        for probe in probes:
            events.setdefault(probe.event, []).append(probe)
        self.taken += list(events)
        return [tuple(same) for same in events.values()]

    def _load_catalog(self):
        if self._catalog is None:
            # imported here, for start-up time: only a glob needs a catalog (kernel.catalog: ~20 ms, -X importtime)
            if self.binary:
                from kprobe_tui.probes.binary import BinaryCatalog

                self._catalog = BinaryCatalog(self.binary)
            else:
                from kprobe_tui.kernel.catalog import Catalog

                self._catalog = Catalog(self.kernel)
        return self._catalog

    def _expand(self, pattern: str, targets: Targets, comm: bool) -> None:
        catalog = self._load_catalog()
        names, classify = catalog.names, catalog.classify
        matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        chosen = []
        for name in matched:
            why = self._left_out(name, classify)
            if why:
                targets.skip(why, name)
            else:
                chosen.append(name)
        if len(chosen) + len(targets.items) > self.max_probes:
            raise UserError(f"{pattern!r} matches {len(chosen)} probeable functions: more than --max-probes "
                            f"{self.max_probes}", f"narrow the pattern, or raise the limit: --max-probes {len(chosen)}")
        extra = [f"{COMM_ARGUMENT}=$comm"] if comm else []
        extra += [f"{CALLER_ARGUMENT}=$stack0:x64"] if self.caller else []
        if comm:
            targets.arguments["comm"] = COMM_ARGUMENT
        for name in chosen:
            try:
                spec = parse_spec([name, *extra], binary=self.binary, group=self.group)
            except UserError:
                targets.skip("names a probe spec cannot spell", name)
                continue
            for probes in self._compile(spec):
                targets.items.append(Target(probes, name, "hit"))

    def _left_out(self, name: str, classify) -> str | None:
        from kprobe_tui.kernel.catalog import Status  # loaded with the catalog (_load_catalog), not before

        status, _reason = classify(name)
        if self.binary:
            from kprobe_tui.probes.binary import LABELS  # loaded with the catalog (_load_catalog), not before

            return None if status.probeable else LABELS.get(status, status.value)
        if status is Status.BREAKPOINT:
            return "breakpoint-only (notrace: name one alone to probe it)"
        if status in (Status.FTRACE, Status.PROBEABLE, Status.CLONE):
            return None
        return {Status.BLACKLISTED: "blacklisted", Status.AMBIGUOUS: "ambiguous (several symbols share the name)",
                Status.HIDDEN: "unknown (addresses hidden)", Status.FREED: "freed after boot (__init)",
                Status.NO_KPROBES: "not probeable (this kernel has no kprobes)"}.get(status, status.value)
