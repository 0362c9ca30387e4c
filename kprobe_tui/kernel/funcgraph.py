"""The kernel's function_graph tracer, borrowed for one run and given back as it was found.

Why the top-level tracer and not an instance of our own: measured in the guests, a 6.1 instance
offers only the ``function`` tracer, and a 6.12 instance has ``function_graph`` but no
``set_graph_function`` (only the top level limits the graph to one function's calls). ``perf
ftrace -G`` borrows the top level too. So a graph run refuses to start unless the tracer is idle
(``nop``), records every setting it changes before changing it, restores them when the run ends
(lifetime's undo: exit, exception, SIGTERM/SIGHUP/SIGINT), and leaves a record of them beside its
run lock so that ``kprobe-tui cleanup`` restores them after a SIGKILL.

Changing ``current_tracer`` clears the top-level ring buffer, as perf ftrace does.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.files import write_atomic
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs

GRAPH_TRACER = "function_graph"
# A kernel function's name as set_graph_function and a probe take it (``.isra.0`` and the like included; no glob).
FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")
RECORD_SUFFIX = ".graph"  # beside the run's lock: the settings to restore after a SIGKILL
MAX_RECORD = 1 << 16
# The plain files we write, each restored from what it said before.
# tracing_on too: perf ftrace leaves it at 0 when it ends (measured, perf 6.1 in the 6.1 guest).
SETTING_FILES = ("set_graph_function", "max_graph_depth", "set_ftrace_pid", "set_ftrace_notrace_pid", "tracing_on",
                 "buffer_size_kb", "set_graph_notrace")
# The kprobes' own work, which a probe on a graphed function (ours for return values, or anyone's) runs inside the
# graph: in the 6.12 guest each probed call grew kprobe_ftrace_handler and kretprobe_rethook_handler children, and a
# return value's event printed inside the handler's call instead of after the call it ends. Left out of the graph
# (set_graph_notrace, which the kernel refuses a name at a time where it does not trace that function).
KPROBE_MACHINERY = ("kprobe_ftrace_handler", "kretprobe_rethook_handler", "pre_handler_kretprobe", "get_kprobe",
                    "arch_rethook_trampoline_callback", "rethook_trampoline_handler", "kprobe_dispatcher",
                    "kretprobe_dispatcher")
# The top level's ring buffer starts at 7 KB a CPU and grows to the kernel's size (1408 KB) when first used,
# unless any instance has set its own size first: the kernel then counts every buffer as grown (6.1 guest,
# measured: after one count or tail, 7 KB stayed, and a graph of dd's 45 reads kept 21 and lost 240 entries;
# 6.12 keeps that mark per buffer and grows the top level with its tracer). A graph run gives a buffer the
# kernel left at its boot size the kernel's own size, and gives back the size it found.
GRAPH_BUFFER_KB = 1408
# Options we set: each call's task and pid (the call tree is per thread), the callee's name on "}"
# lines (a call whose entry was lost is still named), interrupts only when asked.
GRAPH_OPTIONS = ("funcgraph-proc", "funcgraph-tail", "funcgraph-irqs", "funcgraph-cpu", "funcgraph-duration",
                 "funcgraph-abstime", "funcgraph-overhead", "function-fork")


@dataclass(frozen=True)
class GraphSettings:
    function: str
    depth: int  # max_graph_depth: calls this deep are shown as leaves (0: no limit)
    pids: tuple[int, ...] = ()  # only these threads (set_ftrace_pid); () for every thread but ours
    irqs: bool = False  # interrupt handlers inside the calls


@dataclass
class SavedState:
    """What the top level said before we borrowed it."""

    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)


class GraphTracer:
    """``GraphTracer(top, settings).start()``, read ``trace_pipe``, ``stop()`` (or let undo do it)."""

    def __init__(self, top: Tracefs, settings: GraphSettings) -> None:
        self.top = top
        self.settings = settings
        self._undo_token: int | None = None
        self._record: Path | None = None
        self.pipe: int | None = None  # trace_pipe, opened non-blocking once the tracer is set

    def start(self, our_threads: list[int]) -> None:
        """Take the tracer and open its pipe; ``our_threads`` are never graphed (the golden rule: reading
        trace_pipe calls vfs_read)."""
        self._check_available()
        saved = self._save()
        self._record = _write_record(saved)
        self._undo_token = lifetime.undo.push(f"the function_graph tracer ({self.settings.function})",
                                              lambda: self._give_back(saved))
        settings = self.settings
        not_known = UserError(f"the kernel cannot graph {settings.function!r}: the function tracer does not know it",
                              "name a function the function tracer knows: kprobe-tui funcs shows them")
        try:
            self.top.write("set_graph_function", settings.function, append=False)
        except KernelRefused:
            raise not_known from None
        # 6.1 takes a name it does not know without a word and then graphs every function: read it back.
        if settings.function not in self.top.read("set_graph_function").split():
            raise not_known
        self.top.write("max_graph_depth", str(settings.depth), append=False)
        for name in KPROBE_MACHINERY if self.top.exists("set_graph_notrace") else ():
            try:
                self.top.write("set_graph_notrace", name)
            except KernelRefused:
                pass
        if "buffer_size_kb" in saved.files:  # kept small by the kernel: see GRAPH_BUFFER_KB
            self.top.write("buffer_size_kb", str(GRAPH_BUFFER_KB), append=False)
        if settings.pids:
            self.top.write("set_ftrace_pid", " ".join(map(str, settings.pids)), append=False)
        elif self.top.exists("set_ftrace_notrace_pid"):
            self.top.write("set_ftrace_notrace_pid", " ".join(map(str, our_threads)), append=False)
        wanted = {"funcgraph-proc": True, "funcgraph-tail": True, "funcgraph-irqs": settings.irqs,
                  "funcgraph-cpu": True, "funcgraph-duration": True, "funcgraph-abstime": False,
                  "funcgraph-overhead": True, "function-fork": False}
        for option, on in wanted.items():
            if self.top.exists(f"options/{option}"):
                self.top.write(f"options/{option}", "1" if on else "0", append=False)
        self.top.write("current_tracer", GRAPH_TRACER, append=False)
        self.top.write("tracing_on", "1", append=False)
        # Only now: while trace_pipe is open the kernel refuses to change the tracer (EBUSY).
        self.pipe = os.open(self.top.path("trace_pipe"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def _give_back(self, saved: SavedState) -> None:
        if self.pipe is not None:  # first: the tracer cannot be changed while its pipe is open
            os.close(self.pipe)
            self.pipe = None
        restore(self.top, saved, self._record)

    def stop(self) -> None:
        if self._undo_token is not None:
            lifetime.undo.run(self._undo_token)
            self._undo_token = None

    def _check_available(self) -> None:
        top = self.top
        if not top.writable:
            raise UserError("cannot graph calls in a captured snapshot", "run on the live machine")
        if GRAPH_TRACER not in top.read("available_tracers").split():
            raise UserError("this kernel has no function_graph tracer (CONFIG_FUNCTION_GRAPH_TRACER)",
                            "use count or latency on the function instead")
        if not top.exists("set_graph_function"):
            raise UserError("this kernel's tracefs has no set_graph_function", "the graph needs the top-level tracer")
        current = top.read("current_tracer").strip()
        if current != "nop":
            raise UserError(f"the kernel's tracer is in use: current_tracer is {current!r}",
                            "wait for whoever uses it (perf ftrace, trace-cmd, another graph) to finish; "
                            "a leftover of a killed run: kprobe-tui cleanup")

    def _save(self) -> SavedState:
        saved = SavedState()
        for name in SETTING_FILES:
            if self.top.exists(name):
                saved.files[name] = self.top.read(name)
        size = saved.files.get("buffer_size_kb", "")
        if "expanded" in size or not 0 < _kilobytes(size) < GRAPH_BUFFER_KB:
            # not yet grown (the kernel grows it with the tracer: 6.12 always, 6.1 until an instance is sized),
            # "X" (the CPUs' sizes differ) or big enough: left alone, and so not given back
            saved.files.pop("buffer_size_kb", None)
        for option in GRAPH_OPTIONS:
            if self.top.exists(f"options/{option}"):
                saved.options[option] = self.top.read(f"options/{option}").strip()
        return saved


def restore(top: Tracefs, saved: SavedState, record: Path | None) -> None:
    """Give the tracer back: nop first (it stops graphing), then each setting as it was."""
    top.write("current_tracer", "nop", append=False)
    for name, text in saved.files.items():
        top.write(name, _setting_text(name, text), append=False)
    for option, value in saved.options.items():
        top.write(f"options/{option}", value, append=False)
    if record is not None:
        try:
            os.unlink(record)
        except OSError:
            pass


def _setting_text(name: str, text: str) -> str:
    """What to write back so the file reads as it did: the kernel shows empty lists in words."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if name in ("set_ftrace_pid", "set_ftrace_notrace_pid") and lines == ["no pid"]:
        return ""
    if name == "buffer_size_kb":
        return str(_kilobytes(text))
    return " ".join(lines)


def _kilobytes(text: str) -> int:
    """The size a buffer_size_kb file gives first (0 where it gives none: a snapshot without the file)."""
    found = re.match(r"\s*(\d{1,9})\b", text)
    return int(found[1]) if found else 0


def _write_record(saved: SavedState) -> Path | None:
    """The settings beside our run lock, for cleanup after a SIGKILL; None where we have no lock directory."""
    directory = lifetime.lock_dir(create=True)
    if directory is None:
        return None
    path = directory / f"{lifetime.run_name()}{RECORD_SUFFIX}"
    data = json.dumps({"boot": lifetime.boot_id(), "files": saved.files, "options": saved.options}).encode()
    try:
        write_atomic(path, lambda stream: stream.write(data), replace=True, what="graph tracer record")
    except UserError:  # a read-only /run (a QEMU guest's): only a SIGKILL's leftovers stay for a person to mend
        return None
    return path


def dead_runs() -> list[Path]:
    """The records of graph runs that died without giving the tracer back."""
    directory = lifetime.lock_dir()
    if directory is None:
        return []
    return [directory / entry for entry in sorted(os.listdir(directory))
            if entry.endswith(RECORD_SUFFIX) and lifetime.is_stale(entry[:-len(RECORD_SUFFIX)])]


def restore_dead_runs(top: Tracefs) -> list[str]:
    """Give back the tracer that dead graph runs borrowed (``kprobe-tui cleanup``); their run names."""
    restored = []
    for path in dead_runs():
        name = path.name[:-len(RECORD_SUFFIX)]
        saved = _read_record(path)
        if saved is not None and top.read("current_tracer").strip() == GRAPH_TRACER:
            restore(top, saved, path)
            restored.append(name)
        else:  # another boot's, or the tracer was given back already: only the record goes
            path.unlink(missing_ok=True)
    return restored


def _read_record(path: Path) -> SavedState | None:
    data = lifetime.read_record(path, MAX_RECORD, (os.geteuid(),))
    files, options = (data.get("files"), data.get("options")) if data is not None else (None, None)
    if not (isinstance(files, dict) and isinstance(options, dict)):
        return None
    return SavedState({k: v for k, v in files.items() if k in SETTING_FILES and isinstance(v, str)
                       and (k != "buffer_size_kb" or _kilobytes(v))},
                      {k: v for k, v in options.items() if k in GRAPH_OPTIONS and v in ("0", "1")})
