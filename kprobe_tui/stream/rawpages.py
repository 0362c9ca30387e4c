"""Read our instance's per-CPU ``trace_pipe_raw``: whole ring-buffer pages, walked into records.

Each CPU records into a buffer of its own; a read of ``per_cpu/cpuN/trace_pipe_raw`` hands over (and
consumes) one sub-buffer page. The page starts with a header (``events/header_page``): the u64 time of
its first record, and ``commit``, the bytes of records it holds, with two flags in its high bits: events
were lost before this page, and their count is stored just after the records. Each record is a 32-bit
header, ``type_len:5`` then ``time_delta:27`` (nanoseconds since the previous record), and its data
(kernel/trace/ring_buffer.c): type_len 1..28 is data of type_len*4 bytes, 0 data whose length (plus its
own 4 bytes) is the next word, 29 padding (a discarded record, or with no delta the end of the page),
30 a time extend (a delta too big for 27 bits) and 31 an absolute time stamp.

Records come out as ``(ns, cpu, data)``: ``ns`` the clock's nanoseconds (``seconds(ns)`` is the time the
text prints), ``data`` the event's record for ``rawformat.EventDecoder.decode``.
"""

from __future__ import annotations

import bisect
import errno
import os
import struct
from itertools import accumulate, repeat
from operator import and_, itemgetter, rshift

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.instance import Instance
from kprobe_tui.stream.rawformat import FIELD

PAGES_PER_READ = 16  # per CPU and read: the merge's look-ahead (64 KB of records a CPU with 4 KB pages)
COMMIT_MASK = (1 << 27) - 1  # the bits of commit that hold the length (the flags sit at 30 and 31)
MISSED_EVENTS = 1 << 31
MISSED_STORED = 1 << 30
TS_SHIFT = 27
TS_MSB = 0xF8 << 56  # the bits of the clock an absolute time stamp leaves out (rb_fix_abs_ts)
PADDING, TIME_EXTEND, TIME_STAMP = 29, 30, 31
_WORD = struct.Struct("<I")
# The kernel's text takes the lowest CPU's record of two at one nanosecond (__find_next_entry: ts < next_ts);
# 3,000 calls on each of two CPUs here gave 6 such ties.
_time_then_cpu = itemgetter(0, 1)
# A record of type_len 1..28 as one unit: its header word and its data, for a page that is a run of them.
_RECORDS = [struct.Struct(f"<I{4 * type_len}s") for type_len in range(29)]
UNIFORM_RUN = 4  # records of one size that are split in C rather than one by one (below that the set-up costs more)


def seconds(ns: int) -> float:
    """A record's time as the text prints it: seconds, rounded to the microsecond (``ns2usecs``)."""
    return (ns + 500) // 1000 / 1_000_000


class PageLayout:
    """Where a page's header puts its commit word and its records (``events/header_page``)."""

    def __init__(self, header_page: str) -> None:
        fields = {match["decl"].split()[-1]: (int(match["offset"]), int(match["size"])) for match in FIELD.finditer(header_page)}
        if "timestamp" not in fields or "commit" not in fields or "data" not in fields:
            raise UserError("events/header_page does not describe a page's timestamp, commit and data",
                            "this kernel's ring buffer is not one this reader knows: use the text reader")
        commit_offset, commit_size = fields["commit"]
        self.header = struct.Struct(f"<Q{commit_offset - 8}x{'Q' if commit_size == 8 else 'I'}")
        self.data = fields["data"][0]


class RawPages:
    """``RawPages(instance)``; ``read()`` -> records of every CPU in time order; ``close()``."""

    def __init__(self, instance: Instance, pages_per_read: int = PAGES_PER_READ) -> None:
        self.layout = PageLayout(instance.top.read("events/header_page"))
        subbuf = instance.tracefs.path("buffer_subbuf_size_kb")
        self.page_size = int(subbuf.read_text()) * 1024 if subbuf.exists() else os.sysconf("SC_PAGE_SIZE")
        self.pages_per_read = pages_per_read
        self.missed = 0  # events the kernel lost, as counted on the pages
        self.missed_uncounted = 0  # pages after a loss the kernel had no room to count
        self.broken = 0  # pages whose records ran past their commit
        self.drained = False  # the last read emptied every CPU's buffer
        self._pending: list[tuple[int, int, bytes]] = []  # read, not yet handed over: (ns, cpu, data)
        self._ahead: dict[int, int] = {}  # CPU -> its last pending record's time, while it has more pages
        self._fds: dict[int, int] = {}
        per_cpu = instance.tracefs.path("per_cpu")
        try:
            for entry in sorted(os.listdir(per_cpu), key=lambda name: int(name[3:]) if name[3:].isdigit() else -1):
                if entry.startswith("cpu") and entry[3:].isdigit():
                    self._fds[int(entry[3:])] = os.open(per_cpu / entry / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            self.close()
            raise UserError(f"cannot read {per_cpu}: {exc.strerror}", "run as root, in a trace instance of this run") from exc

    def fds(self) -> list[int]:
        """One descriptor a CPU: readable when that CPU has a page (as ``buffer_percent`` says)."""
        return list(self._fds.values())

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def read(self) -> list[tuple[int, int, bytes]]:
        """The records the kernel holds now, every CPU's merged in time order.

        At most ``pages_per_read`` pages of a CPU are read at a time; a CPU that had more may hold
        records older than another CPU's last ones, so those wait for the next read (as trace_pipe,
        it does not wait for a CPU that has nothing now), and that CPU is not read again until its
        own have gone out: the look-ahead stays ``pages_per_read`` pages a CPU (read on regardless, a
        CPU that a flood left behind made every read sort a growing backlog: 1.9 against 0.9 us a record).
        """
        pending = self._pending
        runs = 1 if pending else 0  # runs of records in time order: one needs no merge (0.1 us a record)
        for cpu, fd in self._fds.items():
            if cpu in self._ahead:
                continue  # its records wait for the other CPUs': the look-ahead stays pages_per_read pages a CPU
            held = len(pending)
            last = self._read_cpu(cpu, fd)
            runs += len(pending) > held
            if last is not None:
                self._ahead[cpu] = last
        # A held CPU's unread records come after its last read one, (time, CPU) as the text orders them: records
        # up to the least of those go out. A record of a higher CPU at that very nanosecond waits.
        horizon = min(((last, cpu) for cpu, last in self._ahead.items()), default=None)
        self.drained = horizon is None
        if runs > 1:
            pending.sort(key=_time_then_cpu)  # stable: one CPU's records keep their order; runs make it a merge
        cut = len(pending) if horizon is None else bisect.bisect_right(pending, horizon, key=_time_then_cpu)
        ready, self._pending = pending[:cut], pending[cut:]
        if horizon is not None:  # a CPU whose records all went out reads on
            self._ahead = {cpu: last for cpu, last in self._ahead.items() if (last, cpu) > horizon}
        return ready

    def _read_cpu(self, cpu: int, fd: int) -> int | None:
        """Reads this CPU's pages into the pending records; the time of its last one when it had more pages."""
        for _ in range(self.pages_per_read):
            try:
                page = os.read(fd, self.page_size)
            except BlockingIOError:
                return None
            except OSError as exc:
                if exc.errno == errno.ENODEV:  # the CPU went offline
                    return None
                raise
            if not page:
                return None
            self._walk(page, cpu)
        return self._last_ns(cpu)

    def _last_ns(self, cpu: int) -> int | None:
        for ns, record_cpu, _ in reversed(self._pending):
            if record_cpu == cpu:
                return ns
        return None

    def _walk_uniform(self, page: bytes, cpu: int, at: int, end: int, ts: int) -> tuple[int, int]:
        """Appends the records from ``at`` on that have the first one's size, split and stamped in C; returns where
        they end and the time of the last. A flood's pages are runs of one event's records: in the 6.1 guest, on
        one kprobe flood's pages, a record cost 5.6 us this way against 7.5 us walked one by one (the minimal
        walk and decode of benchmarks/bench_stream.py: 12.3 us)."""
        type_len = page[at] & 0x1F  # the header word is little-endian: type_len is its first byte's low bits
        stride = 4 + 4 * type_len
        count = (end - at) // stride if 0 < type_len <= 28 else 0
        if count < UNIFORM_RUN or page[at + stride] & 0x1F != type_len:
            return at, ts
        headers, records = zip(*_RECORDS[type_len].iter_unpack(memoryview(page)[at:at + count * stride]))
        kinds = bytes(map(and_, headers, repeat(0x1F)))
        run = len(kinds) - len(kinds.lstrip(kinds[:1]))  # up to the first record of another size or kind
        stamps = list(accumulate(map(rshift, headers[:run], repeat(5)), initial=ts))
        self._pending.extend(zip(stamps[1:], repeat(cpu), records[:run]))
        return at + run * stride, stamps[-1]

    def _walk(self, page: bytes, cpu: int) -> None:
        """Appends the page's records to the pending ones, and counts what the page says was lost."""
        ts, commit = self.layout.header.unpack_from(page)
        start = self.layout.data
        end = start + (commit & COMMIT_MASK)
        if end > len(page):
            self.broken += 1
            end = len(page)
        if commit & MISSED_EVENTS:
            if commit & MISSED_STORED and end + 8 <= len(page):
                self.missed += struct.unpack_from("<Q", page, end)[0]
            else:
                self.missed_uncounted += 1
        at, ts = self._walk_uniform(page, cpu, start, end, ts)
        word = _WORD.unpack_from
        out = self._pending.append
        while at + 4 <= end:
            header = word(page, at)[0]
            type_len, delta = header & 0x1F, header >> 5
            if type_len <= 28:
                if type_len:
                    size, data = type_len * 4, at + 4
                elif at + 8 <= end:
                    size, data = word(page, at + 4)[0] - 4, at + 8
                else:
                    break
                if size < 0 or data + size > end:
                    self.broken += 1
                    return
                ts += delta
                out((ts, cpu, page[data:data + size]))
                at = data + size
            elif type_len == PADDING:
                if delta == 0 or at + 8 > end:
                    return  # the rest of the page is empty
                at += 4 + word(page, at + 4)[0]  # a discarded record: its time does not count (rb_update_read_stamp)
            elif at + 8 > end:
                break
            elif type_len == TIME_EXTEND:
                ts += (word(page, at + 4)[0] << TS_SHIFT) + delta
                at += 8
            else:  # TIME_STAMP: the clock itself, less its top bits
                stamp = (word(page, at + 4)[0] << TS_SHIFT) + delta
                if ts & TS_MSB:
                    stamp |= ts & TS_MSB
                    if stamp < ts:
                        stamp += 1 << 59
                ts = stamp
                at += 8
        if at != end:
            self.broken += 1
