"""What to aggregate: the keys, the value, and how values are grouped into buckets.

One ``Aggregation`` goes to whichever engine runs: the kernel engine compiles it to hist triggers,
the user-space engine evaluates it on events. Both group values with ``Log2`` and ``Linear`` here,
so the two agree to the bucket. The buckets are bpftrace's: ``hist()`` is [0], [1], [2, 4), [4, 8)...
with negative values in (..., 0); ``lhist(min, max, step)`` has an underflow and an overflow bucket.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from operator import floordiv, sub

from kprobe_tui.errors import UserError
from kprobe_tui.stream.filterexpr import split_transform, swap_bytes

__all__ = ["Aggregation", "Field", "Linear", "STACK_KEY", "UNITS", "parse_field", "parse_linear"]

# Keys every event has; any other key names an argument the probe captures.
HEADER_KEYS = ("comm", "pid", "probe")
# A latency is measured at the return, where the call's arguments are gone: only the caller keys it.
LATENCY_KEYS = ("comm", "pid")
# The key of a run by call path (``StackRun``): no field of an event, the stack the kernel walks at the hit
# (a latency's, at the entry).
STACK_KEY = "stack"
# The kernel's compound keys (TRACING_MAP_KEYS_MAX); the user-space engine keeps the same limit.
MAX_KEYS = 3
# More buckets than this is not a picture anyone reads (and not a table the kernel should keep).
MAX_LINEAR_BUCKETS = 1000
KINDS = ("count", "hist", "latency")
UNITS = {"ns": ("nsecs", 1), "us": ("usecs", 1_000), "ms": ("msecs", 1_000_000)}
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Field:
    """A key or value: a header field (comm, pid, probe) or a captured argument, maybe byte-swapped."""

    name: str
    transform: str | None = None  # "ntohs"/"ntohl": shown in host byte order

    @property
    def label(self) -> str:
        return f"{self.transform}({self.name})" if self.transform else self.name

    @property
    def is_header(self) -> bool:
        return self.name in HEADER_KEYS

    def shown(self, value):
        """A raw value as the user reads it (swapped when the field is in network byte order)."""
        return swap_bytes(value, self.transform) if self.transform and isinstance(value, int) else value


def parse_field(text: str, what: str = "key") -> Field:
    """``comm``, ``len``, ``ntohs(dport)`` -> Field, or a UserError naming the text."""
    name, transform = split_transform(text)
    if not _NAME.match(name):
        raise UserError(f"{text!r}: not a field name", f"a {what} is comm, pid, probe, or an argument name "
                        "(e.g. len, or ntohs(dport) for a port in network byte order)")
    if transform and name in HEADER_KEYS:
        raise UserError(f"{text!r}: {name} is not in network byte order", f"use {name} without {transform}()")
    return Field(name, transform)


def keys_offered(kind: str, fields: Iterable[str] = (), several_probes: bool = False) -> list[str]:
    """What an aggregation of ``kind`` can be keyed by, in the order a view offers them: the header keys
    (``probe`` only where several probes feed one table), then the probe's captured ``fields``."""
    if kind == "latency":
        return list(LATENCY_KEYS)
    return [*(key for key in HEADER_KEYS if key != "probe" or several_probes), *fields]


@dataclass(frozen=True)
class Log2:
    """bpftrace's ``hist()``: bucket 0 is [0, 1), bucket i >= 1 is [2^(i-1), 2^i), -1 is (..., 0)."""

    @staticmethod
    def index(value: int) -> int:
        return -1 if value < 0 else value.bit_length()

    @staticmethod
    def counts(values: list[int], low: int, high: int) -> Counter:
        """Hits per bucket of ``values`` (``low``/``high`` their extremes): what ``index`` gives, counted in C."""
        counts = Counter(map(int.bit_length, values))
        if low < 0:  # a negative counted by its magnitude's bucket: move it (two passes fewer than clamping)
            negative = list(filter((0).__gt__, values))
            counts.subtract(map(int.bit_length, negative))
            counts += Counter()  # drops the buckets left at 0
            counts[-1] = len(negative)
        return counts

    @staticmethod
    def bounds(index: int) -> tuple[int | None, int | None]:
        if index < 0:
            return None, 0
        return (0, 1) if index == 0 else (1 << (index - 1), 1 << index)

    def indices(self, low: int, high: int) -> range:
        """Every bucket from ``low`` to ``high``: a picture shows the empty ones between too."""
        return range(low, high + 1)

    def describe(self) -> str:
        return "log2"


@dataclass(frozen=True)
class Linear:
    """bpftrace's ``lhist(min, max, step)``: [min + i*step, min + (i+1)*step), with (..., min) and [max, ...)."""

    low: int
    high: int
    step: int

    def __post_init__(self) -> None:
        if self.step <= 0:
            raise UserError(f"--linear step {self.step}: must be positive", "e.g. --linear 0,1000,100")
        if self.high <= self.low:
            raise UserError(f"--linear {self.low},{self.high}: MAX must be above MIN", "e.g. --linear 0,1000,100")
        if (self.high - self.low) % self.step:
            raise UserError(f"--linear {self.low},{self.high},{self.step}: MAX-MIN is not a multiple of STEP",
                            f"e.g. --linear {self.low},{self.low + self.step * -(-(self.high - self.low) // self.step)},{self.step}")
        if self.count > MAX_LINEAR_BUCKETS:
            raise UserError(f"--linear {self.low},{self.high},{self.step}: {self.count} buckets, "
                            f"more than {MAX_LINEAR_BUCKETS}", "use a larger STEP or a narrower range")

    @property
    def count(self) -> int:
        return (self.high - self.low) // self.step

    def index(self, value: int) -> int:
        if value < self.low:
            return -1
        if value >= self.high:
            return self.count
        return (value - self.low) // self.step

    def counts(self, values: list[int], low: int, high: int) -> Counter:
        """Hits per bucket of ``values`` (``low``/``high`` their extremes): what ``index`` gives, counted in C."""
        indices = map(floordiv, map(sub, values, repeat(self.low)), repeat(self.step))
        if low < self.low:
            indices = map(max, indices, repeat(-1))
        if high >= self.high:
            indices = map(min, indices, repeat(self.count))
        return Counter(indices)

    def bounds(self, index: int) -> tuple[int | None, int | None]:
        if index < 0:
            return None, self.low
        if index >= self.count:
            return self.high, None
        start = self.low + index * self.step
        return start, start + self.step

    def indices(self, low: int, high: int) -> range:
        return range(low, high + 1)

    def describe(self) -> str:
        return f"linear {self.low},{self.high},{self.step}"


def parse_linear(text: str) -> Linear:
    """``MIN,MAX,STEP`` (integers) -> Linear."""
    parts = text.split(",")
    try:
        low, high, step = (int(part, 0) for part in parts)
    except ValueError:
        raise UserError(f"--linear {text}: expected MIN,MAX,STEP (integers)", "e.g. --linear 0,1000,100") from None
    return Linear(low, high, step)


@dataclass(frozen=True)
class Aggregation:
    """What one run computes: hits per key (count), a distribution of a value (hist), or of latency."""

    kind: str
    keys: tuple[Field, ...] = ()
    value: Field | None = None  # hist: the captured argument
    buckets: Log2 | Linear | None = None
    unit: str = "us"  # latency
    top: int | None = None  # keep the N keys with the most hits

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}")
        if len(self.keys) > MAX_KEYS:
            raise UserError(f"{len(self.keys)} keys: at most {MAX_KEYS}", "the kernel's hist tables take up to 3 keys")
        if len({key.label for key in self.keys}) != len(self.keys):
            raise UserError("a key is named twice", "name each --by key once")
        if self.kind == "hist":
            if self.value is None:
                raise ValueError("a histogram needs a value")
            if self.value.is_header:
                raise UserError(f"{self.value.name!r}: not a numeric argument", "histograms are of captured values, e.g. len")
        if self.kind == "latency" and self.unit not in UNITS:
            raise UserError(f"--unit {self.unit}: one of {', '.join(UNITS)}")
        if self.kind == "latency" and any(key.name not in (*LATENCY_KEYS, STACK_KEY) for key in self.keys):
            raise UserError("latency is keyed by comm, pid or stack", "the return of a call has no arguments to key it by")
        if self.top is not None and self.top < 1:
            raise UserError(f"--top {self.top}: must be at least 1")
        if self.kind != "count" and self.buckets is None:
            object.__setattr__(self, "buckets", Log2())

    @property
    def histogram_value(self) -> Field:
        """The captured argument a hist is of (``__post_init__`` refuses a hist without one)."""
        if self.value is None:
            raise ValueError(f"a {self.kind} aggregation has no value")
        return self.value

    @property
    def bucket_scheme(self) -> Log2 | Linear:
        """The buckets of a hist or a latency (``__post_init__`` gives them Log2 when none was asked for)."""
        if self.buckets is None:
            raise ValueError(f"a {self.kind} aggregation has no buckets")
        return self.buckets

    @property
    def has_value(self) -> bool:
        return self.kind != "count"

    @property
    def value_label(self) -> str | None:
        """``@usecs`` in bpftrace's words for latency, the field's name for a histogram."""
        if self.kind == "latency":
            return UNITS[self.unit][0]
        return self.value.label if self.value else None

    @property
    def unit_ns(self) -> int:
        """Nanoseconds per latency unit."""
        return UNITS[self.unit][1]

    def arguments(self) -> list[str]:
        """The captured arguments this aggregation reads (its value and its non-header keys)."""
        names = [self.value.name] if self.value is not None else []
        names += [key.name for key in self.keys if not key.is_header]
        return list(dict.fromkeys(names))

