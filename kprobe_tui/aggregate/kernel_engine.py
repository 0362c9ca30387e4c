"""The kernel engines: hist triggers (and a synthetic event for latency), or the profile files.

Both work in this run's own trace instance, so nothing of another tool's changes, and every
trigger and synthetic event is registered with the run's undo (``kernel.triggers``) as it is made.
User space reads each ``hist`` file once per ``collect()``: a flood of hits costs it nothing more.
Kernel tables are cumulative; ``collect()`` returns what changed since the previous one.
"""

from __future__ import annotations

import itertools
from collections import Counter

from kprobe_tui.aggregate.histfile import HistTable, as_signed, parse_hist
from kprobe_tui.aggregate.model import Aggregation, Linear, Log2
from kprobe_tui.aggregate.tally import Tally
from kprobe_tui.aggregate.targets import Target
from kprobe_tui.aggregate.triggers import SYNTHETIC_COMM, LatencyTriggers, Trigger, latency_triggers, table_trigger
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.kernel.profile import read_hits
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.kernel.triggers import Triggers, scoped_name
from kprobe_tui.stream import filterexpr

# A small ring: events are built for the triggers and discarded, never kept for a reader.
BUFFER_KB = 64
_TAGS = itertools.count(1)  # instance, variable and synthetic event names unique within this process


def own_instance(top: Tracefs) -> Instance:
    """An instance of its own for each aggregation (a tail or another aggregation may run beside it),
    named for this run so that cleanup knows it as ours after a SIGKILL."""
    return Instance(top, scoped_name(f"agg{next(_TAGS)}"))


def field_number(value: int, layout: tuple[int, bool] | None) -> int:
    """A table's unsigned 64-bit print of a field, as the field's own signed or unsigned value."""
    if layout is None or not layout[1]:
        return value
    bits = layout[0] * 8
    return as_signed(value & ((1 << bits) - 1), bits)


class _InstanceOwner:
    """Our instance plus what is made in it, removed in reverse order of making."""

    def __init__(self, top: Tracefs) -> None:
        self.top = top
        self.instance = own_instance(top)
        self.triggers = Triggers(top, self.instance.tracefs)
        self._tokens: list[int] = []

    def add(self, trigger: Trigger) -> int:
        token = self.triggers.add(trigger.group, trigger.event, trigger.text())
        self._tokens.append(token)
        return token

    def drop(self, token: int) -> None:
        self._tokens.remove(token)
        self.triggers.remove(token)

    def drain(self) -> None:
        """Nothing to wait for: kernel tables are read as they are."""

    def define(self, name: str, definition: str) -> None:
        self._tokens.append(self.triggers.define_synthetic(name, definition))

    def add_latency(self, aggregation: Aggregation, targets: list[Target], conditions: dict[str, str],
                    comm_field: str | None, stack_key: str | None = None) -> LatencyTriggers:
        """The synthetic event and the triggers that time the entry-return pair of ``targets`` (see
        ``latency_triggers``), made so that a hit during set-up is counted everywhere or nowhere."""
        entry = next(t for t in targets if t.role == "entry")
        ret = next(t for t in targets if t.role == "return")
        tag = str(next(_TAGS))
        plan = latency_triggers(aggregation, (entry.group, entry.event), (ret.group, ret.event), scoped_name(f"lat{tag}"),
                                tag, conditions.get(entry.event, ""), conditions.get(ret.event, ""), comm_field, stack_key)
        self.define(plan.synthetic.name, plan.synthetic.definition())
        for trigger in plan.downstream() + plan.upstream():
            self.add(trigger)
        return plan

    def stop(self) -> None:
        failures = []
        for token in reversed(self._tokens):
            try:
                lifetime.undo.run(token)
            except UserError as exc:
                failures.append(exc.message)
        self._tokens = []
        self.instance.remove()
        if failures:
            raise UserError("could not remove " + "; ".join(failures), "kprobe-tui cleanup removes them once this run is gone")


class KernelHistEngine(_InstanceOwner):
    """Counts, histograms and latency in hist triggers on our events, in our instance."""

    name = "kernel"
    method = "hist"

    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target], arguments: dict[str, str],
                 conditions: dict[str, str]) -> None:
        """``conditions``: event -> the trigger's filter (the user's, pushed down, with our threads left out)."""
        super().__init__(top)
        self.aggregation = aggregation
        self.targets = targets
        self.arguments = arguments
        self.conditions = conditions
        self._tables: dict[str, Trigger] = {}  # event -> its table trigger
        self._layouts: dict[str, dict[str, tuple[int, bool]]] = {}
        self._strings: dict[str, frozenset[str]] = {}
        self._seen: dict[str, Counter] = {}  # table -> kernel key -> cumulative hits
        self._sums: Counter = Counter()  # latency: kernel key -> cumulative sum
        self._dropped: Counter = Counter()
        self._unmatched = 0
        self._latency: LatencyTriggers | None = None

    def start(self) -> None:
        self.instance.create(BUFFER_KB)
        if self.aggregation.kind == "latency":
            self._latency = self.add_latency(self.aggregation, self.targets, self.conditions, self.arguments.get("comm"))
            return
        for target in self.targets:
            format_text = self.instance.event_format(target.group, target.event)
            self._layouts[target.event] = filterexpr.field_layout(format_text)
            self._strings[target.event] = frozenset(
                name for name, kind in filterexpr.field_kinds(format_text).items() if kind == "str")
            trigger = table_trigger(self.aggregation, target.group, target.event, self.arguments,
                                    self.conditions.get(target.event, ""))
            self.add(trigger)
            self._tables[target.event] = trigger

    # -- reading ---------------------------------------------------------------------------------

    def collect(self) -> Tally:
        if self._latency is not None:
            return self._collect_latency(self._latency)
        tally = Tally()
        for target in self.targets:
            table = self._table(target.group, target.event, self._tables[target.event], self._strings[target.event])
            values: dict[tuple, Counter] = {}
            for entry, hits in self._new_hits(target.event, table):
                self._add(tally, values, target, entry.key, hits, self._layouts[target.event])
            for key, counted in values.items():  # one merge per key, not per distinct value
                tally.cell(key).add_values(counted)
            tally.dropped += self._new_dropped(target.event, table)
        return tally

    def _table(self, group: str, event: str, trigger: Trigger, strings: frozenset[str] = frozenset(),
               tables: list[HistTable] | None = None) -> HistTable:
        for table in tables if tables is not None else parse_hist(self.triggers.hist(group, event), strings):
            if trigger.matches(table):
                return table
        raise UserError(f"the hist table of {group}/{event} is gone (its trigger was removed by someone else)")

    def _new_hits(self, name: str, table: HistTable):
        """(entry, hits since the last collect) of each table entry that had any."""
        seen = self._seen.setdefault(name, Counter())
        for entry in table.entries:
            new = entry.hitcount - seen[entry.key]
            if new > 0:
                seen[entry.key] = entry.hitcount
                yield entry, new

    def _new_dropped(self, name: str, table: HistTable) -> int:
        new = max(0, table.dropped - self._dropped[name])
        self._dropped[name] += new
        return new

    def _add(self, tally: Tally, values: dict, target: Target, kernel_key: tuple, hits: int, layout: dict) -> None:
        """One table entry's new hits, as a model key (and, for a histogram, a value into ``values``)."""
        parts = iter(kernel_key)
        key: list[object] = []
        for field in self.aggregation.keys:
            if field.name == "probe":
                key.append(target.label)
            elif field.name == "comm":
                part = next(parts)
                key.append(part[0] if isinstance(part, tuple) else part)  # (comm, pid) of .execname: summed by comm
            elif field.name == "pid":
                key.append(next(parts))
            else:
                raw = next(parts)
                argument = self.arguments.get(field.name, field.name)
                key.append(field_number(raw, layout.get(argument)) if isinstance(raw, int) else raw)
        if self.aggregation.kind == "hist":
            value = field_number(next(parts), layout.get(self.arguments[self.aggregation.histogram_value.name]))
            values.setdefault(tuple(key), Counter())[value] += hits
        else:
            tally.count(tuple(key), hits)

    def _collect_latency(self, plan: LatencyTriggers) -> Tally:
        # One read for both tables: a return between them is rare, and only makes an extreme its bucket's bound.
        tables = parse_hist(self.triggers.hist("synthetic", plan.synthetic.name), frozenset({SYNTHETIC_COMM}))
        table = self._table("synthetic", plan.synthetic.name, plan.table, tables=tables)
        tally = Tally()
        for entry, hits in self._new_hits("latency", table):
            *by, bucket = entry.key  # by: comm (the synthetic event's string) or pid, in the model's order
            total = entry.values.get("lat", 0)
            tally.cell(tuple(by)).add_grouped(bucket, hits, total - self._sums[entry.key])
            self._sums[entry.key] = total
        latencies: dict[tuple, Counter] = {}
        for entry, hits in self._new_hits("extremes", self._table("synthetic", plan.synthetic.name, plan.extremes,
                                                                  tables=tables)):
            *by, latency = entry.key
            latencies.setdefault(tuple(by), Counter())[latency] += hits
        for key, cell in tally.cells.items():
            assert cell.grouped is not None, "a latency cell is made by add_grouped"
            cell.extend(self._extreme(cell.grouped, latencies.get(key, Counter()), min),
                        self._extreme(cell.grouped, latencies.get(key, Counter()), max))
        returns = self._table(plan.returns.group, plan.returns.event, plan.returns)
        unmatched = max(0, returns.hits - table.hits)
        tally.unmatched = max(0, unmatched - self._unmatched)
        self._unmatched = max(unmatched, self._unmatched)
        tally.dropped = self._new_dropped("latency", table)
        return tally

    def _extreme(self, buckets: Counter, latencies: Counter, end) -> int:
        return extreme(self.aggregation.bucket_scheme, buckets, latencies, end)


def extreme(scheme: Log2 | Linear, buckets: Counter, latencies: Counter, end) -> int:
    """The least (``end`` min) or greatest (max) latency: the exact table's, when it has every hit of
    that end's bucket; else the bucket's own bound (the exact table was full)."""
    bucket = end(buckets)
    inside = [latency for latency in latencies if scheme.index(latency) == bucket]
    if inside and sum(latencies[latency] for latency in inside) == buckets[bucket]:
        return end(inside)
    low, high = scheme.bounds(bucket)
    assert low is not None and high is not None, "latencies are never negative: every bucket is closed"
    return low if end is min else high - 1


class ProfileEngine(_InstanceOwner):
    """Hits per probe from kprobe_profile/uprobe_profile: our probes are enabled in our instance with
    recording off, so the kernel counts every hit and records nothing."""

    name = "kernel"
    method = "profile"

    def __init__(self, top: Tracefs, aggregation: Aggregation, targets: list[Target]) -> None:
        super().__init__(top)
        self.keyed = bool(aggregation.keys)  # by probe (the only key a profile knows), or one total
        self.targets = targets
        self._seen: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        self.instance.create()
        self.instance.tracefs.write("tracing_on", "0", append=False)
        for target in self.targets:
            self.instance.enable(target.group, target.event)

    def collect(self) -> Tally:
        hits = read_hits(self.top)
        tally = Tally()
        for target in self.targets:
            found = hits.get(f"{target.group}/{target.event}")
            if found is None:
                continue
            misses = found.misses or 0
            before_hits, before_misses = self._seen.get(target.event, (0, 0))
            self._seen[target.event] = (found.hits, misses)
            tally.lost += max(0, misses - before_misses)
            if found.hits > before_hits:
                tally.count((target.label,) if self.keyed else (), found.hits - before_hits)
        return tally
