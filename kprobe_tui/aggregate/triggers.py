"""The aggregation model as hist triggers and synthetic events (Documentation/trace/histogram.rst).

What the guests' kernels (Debian 6.1 and 6.12) taught, each checked there:

* Counts and histograms key the kernel table by the exact value (``keys=len``), never ``len.log2``:
  the kernel's ``.log2`` is ``ilog2(roundup_pow_of_two(v))``, so 5..8 share a bucket where bpftrace's
  ``hist()`` has [4, 8), signed values print as unsigned, and ``.buckets=N`` starts at 0 where
  ``lhist`` starts at MIN. Exact keys give every bucket, sum, min and max exactly, in user space.
* Latency has as many distinct values as calls, so there the kernel groups: the return event's
  trigger computes ``lat`` and ``lat+1`` and passes both to a synthetic event, whose table is keyed
  by ``lat1.log2``: ceil(log2(lat+1)) is exactly bpftrace's bucket of ``lat``. Its ``vals=lat`` sums.
* A trigger's ``common_timestamp.usecs`` switches every timestamp of that trigger to microseconds
  and refuses a constant beside it ("Timestamp units in expression don't match"): units come from
  dividing nanoseconds (``common_timestamp/1000``), exact because timestamps are past 2^20 (below
  that the kernel divides by a multiply-and-shift that may be one off).
* Variables are read once: the return's ``$ts`` is cleared when read. A thread's nested call
  overwrites its entry's ``$ts``; the innermost return reads it and the outer returns find it unset
  and generate nothing. So only the innermost call of a recursion is timed, as bcc's funclatency
  and bpftrace's ``@start[tid]`` do; the outer returns are counted as ``unmatched`` by a second,
  plain trigger on the return event.
* Minimum and maximum come from a second table on the synthetic event, keyed by the exact latency
  (``keys=lat``): the least and the greatest latency of the lowest and highest log2 bucket. It
  replaced two ``onmax()`` trackers (one ``save()`` each), which cost a vfs_read 2.7 us in the 6.1
  guest against 0.9 us for this table (TCG; the whole chain 14 us, bpftrace's one-liner 4.8 us), had
  to be remade every interval (a variable cannot be redefined) and never saved a latency of 0 (the
  minimum was the largest negated latency: 0 negates to 0). A table full of distinct latencies drops
  new ones; where it did not keep every hit of an end bucket, that bucket's bound stands for the extreme.
* ``sort=`` on a modified key is refused ("Invalid sort modifier") and a ``sort=len`` shows as
  ``sort=len.log2``, which the kernel cannot parse back: a trigger is removed by the text it was
  written with, so we never write ``sort=`` (user space sorts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kprobe_tui.aggregate.histfile import HistTable
from kprobe_tui.aggregate.model import STACK_KEY, Aggregation, Field
from kprobe_tui.errors import UserError

COMM_KEY = "common_pid.execname"
PID_KEY = "common_pid"
# One entry for the whole event, when nothing else is a key (every event has the same common_type).
WHOLE_EVENT_KEY = "common_type"
KERNEL_MAX_KEYS = 3
# Distinct values a count or histogram table keeps (the kernel's default is 2048; beyond the size
# hits are dropped and counted). 8192 entries cost the kernel about 1 MB.
TABLE_SIZE = 8192
LATENCY_FIELDS = (("u64", "lat"), ("u64", "lat1"))
SYNTHETIC_COMM = "comm"  # the latency synthetic event's string field (a dynamic string: char comm[])
SYNTHETIC_STACK = "stack"  # a latency by stack's synthetic event: the entry's kernel stack (6.4+: unsigned long[])
_UNIT_DIVISOR = {"ns": 1, "us": 1_000, "ms": 1_000_000}


@dataclass(frozen=True)
class Trigger:
    """One ``hist:`` trigger on ``events/<group>/<event>/trigger`` of our trace instance."""

    group: str
    event: str
    keys: tuple[str, ...]
    values: tuple[str, ...] = ()  # summed besides hitcount
    variables: tuple[tuple[str, str], ...] = ()  # (name, expression)
    handler: str = ""  # onmatch(...).trace(...) or onmax(...).save(...)
    filter: str = ""
    size: int | None = None

    def text(self) -> str:
        parts = [f"hist:keys={','.join(self.keys)}", f"vals={','.join(('hitcount', *self.values))}"]
        parts += [f"{name}={expression}" for name, expression in self.variables]
        if self.size:
            parts.append(f"size={self.size}")
        if self.handler:
            parts.append(self.handler)
        text = ":".join(parts)
        return f"{text} if {self.filter}" if self.filter else text

    def matches(self, table: HistTable) -> bool:
        """Whether a table of the ``hist`` file is this trigger's (the kernel shows it normalised)."""
        params = table.params
        return (params.get("keys") == ",".join(self.keys)
                and params.get("vals") == ",".join(("hitcount", *self.values))
                and variable_names(params) == {name for name, _ in self.variables})


def variable_names(params: dict[str, str]) -> set[str]:
    """Variables a trigger defines: the kernel joins ``a=x:b=y`` into one ``a=x,b=y`` part."""
    names = set()
    for name, value in params.items():
        if name in ("keys", "vals", "sort", "size", "clock", "name", "handlers", "filter"):
            continue
        names.add(name)
        names.update(part.split("=", 1)[0] for part in value.split(",")[1:] if "=" in part)
    return names


@dataclass(frozen=True)
class SyntheticEvent:
    name: str
    fields: tuple[tuple[str, str], ...]

    def definition(self) -> str:
        return f"{self.name} " + "; ".join(f"{type_} {name}" for type_, name in self.fields)


def kernel_key(field: Field, arguments: dict[str, str]) -> str | None:
    """The table key for a model key; None for ``probe`` (each probe has its own table).

    ``comm`` is the probe's own capture of ``$comm`` when it has one (the comm at the hit); else
    ``common_pid.execname``: the pid, shown with the comm saved when its entry was made, and summed by
    comm in user space.
    """
    if field.name == "comm":
        return arguments.get("comm", COMM_KEY)
    if field.name == "pid":
        return PID_KEY
    if field.name == "probe":
        return None
    return arguments.get(field.name, field.name)


def _table_keys(aggregation: Aggregation, arguments: dict[str, str], extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    keys = tuple(key for key in (kernel_key(field, arguments) for field in aggregation.keys) if key) + extra
    if len(keys) > KERNEL_MAX_KEYS:
        raise UserError(f"{len(keys)} keys for one kernel table: at most {KERNEL_MAX_KEYS}",
                        "use fewer --by keys, or --engine user")
    return keys or (WHOLE_EVENT_KEY,)


def table_trigger(aggregation: Aggregation, group: str, event: str, arguments: dict[str, str], condition: str) -> Trigger:
    """Counts (per key) or the exact distribution of the value (per key) on a probe event.

    ``arguments``: model field name -> the captured argument's name in the event."""
    extra = (arguments[aggregation.histogram_value.name],) if aggregation.kind == "hist" else ()
    return Trigger(group, event, _table_keys(aggregation, arguments, extra), filter=condition, size=TABLE_SIZE)


@dataclass(frozen=True)
class LatencyTriggers:
    """Entry timestamp -> return computes lat, lat+1 -> synthetic event -> log2 table and exact table."""

    synthetic: SyntheticEvent
    entry: Trigger
    ret: Trigger
    returns: Trigger  # every return: those the synthetic event did not get were unmatched
    table: Trigger  # on synthetic/<name>: hits and sum per (key, bucket)
    extremes: Trigger  # on synthetic/<name>: hits per (key, exact latency), for the minimum and maximum

    def downstream(self) -> list[Trigger]:
        """What takes the synthetic events and returns, made before anything generates them: a hit during
        set-up is counted everywhere or nowhere."""
        return [self.table, self.extremes, self.returns]

    def upstream(self) -> list[Trigger]:
        """The entry's timestamp, then the return's computation: made last, removed first."""
        return [self.entry, self.ret]


def latency_triggers(aggregation: Aggregation, entry: tuple[str, str], ret: tuple[str, str], synthetic_name: str,
                     tag: str, entry_filter: str, return_filter: str, comm_field: str | None = None,
                     stack_key: str | None = None) -> LatencyTriggers:
    """``comm_field``: the return probe's capture of ``$comm``, for latency by comm. It goes into the
    synthetic event as a string: ``common_pid.execname`` there would be the comm when the table entry
    for that pid and bucket was made, so a thread that renamed itself would be counted under either.

    ``stack_key``: a latency by stack (``common_stacktrace``, or ``stacktrace`` before 6.4's rename): the
    entry saves its stack in a variable, the return passes it to the synthetic event (a field of type
    ``unsigned long[]``: 6.4+), whose tables are keyed by it first (``stack.stacktrace``)."""
    divisor = _UNIT_DIVISOR[aggregation.unit]
    now = "common_timestamp" if divisor == 1 else f"common_timestamp/{divisor}"
    ts, lat, lat1, saved, passed = f"ts{tag}", f"lt{tag}", f"lb{tag}", f"st{tag}", f"sk{tag}"
    fields: tuple[tuple[str, str], ...] = LATENCY_FIELDS
    params = f"${lat},${lat1}"
    entry_variables: tuple[tuple[str, str], ...] = ((ts, now),)
    return_variables: tuple[tuple[str, str], ...] = ((lat, f"{now}-${ts}"), (lat1, f"{now}-${ts}+1"))
    if stack_key:
        fields, params = fields + (("unsigned long[]", SYNTHETIC_STACK),), f"{params},${passed}"
        entry_variables += ((saved, stack_key),)
        return_variables += ((passed, f"${saved}"),)
    if comm_field:
        fields, params = fields + (("char", "comm[]"),), f"{params},{comm_field}"
    synthetic = SyntheticEvent(synthetic_name, fields)
    keys = tuple(key for key in aggregation.keys if key.name != STACK_KEY)
    by = (*((f"{SYNTHETIC_STACK}.stacktrace",) if stack_key else ()),
          *(_table_keys(replace(aggregation, keys=keys), {"comm": SYNTHETIC_COMM}) if keys else ()))
    return LatencyTriggers(
        synthetic=synthetic,
        entry=Trigger(*entry, (PID_KEY,), variables=entry_variables, filter=entry_filter),
        ret=Trigger(*ret, (PID_KEY,), variables=return_variables,
                    handler=f"onmatch({entry[0]}.{entry[1]}).trace({synthetic_name},{params})", filter=return_filter),
        returns=Trigger(*ret, (WHOLE_EVENT_KEY,), filter=return_filter),
        table=Trigger("synthetic", synthetic_name, (*by, "lat1.log2"), values=("lat",), size=TABLE_SIZE if stack_key else None),
        extremes=Trigger("synthetic", synthetic_name, (*by, "lat"), size=TABLE_SIZE),
    )
