"""What perf probe prints, byte for byte (tools/perf/util/probe-event.c and builtin-probe.c).

``Added new event:`` (or ``events:``), one ``  GROUP:EVENT          (on POINT in MODULE with ARGS)``
line per probe, then how to record it: on stderr, as perf's pr_info. ``-l`` prints the same lines
for the probes the kernel holds, on stdout; ``-d`` says ``Removed event: GROUP:EVENT`` on stderr.
"""

from __future__ import annotations

from dataclasses import dataclass

from kprobe_tui.probes.spec import ProbeArg, ProbeSpec


@dataclass(frozen=True)
class Point:
    """perf's perf_probe_point: where a probe is, in the words perf prints it."""

    function: str | None = None
    offset: int = 0
    line: int = 0
    is_return: bool = False
    file: str | None = None

    def text(self) -> str:
        """synthesize_perf_probe_point: ``FUNC[+OFF|:LINE|%return][@FILE]`` (FILE cut to its last 30
        characters, at a '/'), ``@FILE:LINE`` without a function."""
        out = ""
        if self.function:
            out = self.function
            if self.offset:
                out += f"+{self.offset}"
            elif self.line:
                out += f":{self.line}"
            elif self.is_return:
                out += "%return"
        if self.file:
            shown = self.file
            if len(shown) > 30:
                tail = shown[len(shown) - 30 :]
                slash = tail.find("/")
                shown = tail[slash + 1 :] if slash >= 0 else tail
            out += f"@{shown}"
            if not self.function and self.line:
                out += f":{self.line}"
        return out


def asked_point(spec: ProbeSpec) -> Point:
    """The point as the user wrote it (what perf prints when it adds a probe; a ;PATTERN is not shown)."""
    if spec.address is not None:
        return Point(f"0x{spec.address:x}", is_return=spec.is_return)
    return Point(spec.function, spec.offset, spec.line or 0, spec.is_return, spec.source)


def asked_arg(arg: ProbeArg) -> str:
    """synthesize_perf_probe_arg of an argument as written: perf names an access path after its last
    member (``flags=r->flags``), keeps the rest as typed (``len``, ``sum:x``, ``+0(%di):u32``)."""
    name = arg.name
    if name is None and arg.kind == "var" and arg.path:
        members = [step.member for step in arg.path if step.op != "[]"]
        name = members[-1] if members else arg.var
    typed = f":{arg.type}" if arg.type else ""
    return f"{name}={arg.text}{typed}" if name else f"{arg.text}{typed}"


def event_line(group: str, event: str, point: str, module: str | None, args: list[str]) -> str:
    """perf_probe_event__sprintf: ``  GROUP:EVENT (padded to 20) (on POINT[ in MODULE][ with ARGS])``."""
    line = f"  {f'{group}:{event}':<20} (on {point}"
    if module:
        line += f" in {module}"
    if args:
        line += " with " + " ".join(args)
    return line + ")"


def added(lines: list[str], last: tuple[str, str] | None) -> str:
    """perf_add_probe_events' message: the probes' lines, then how to record the last one."""
    out = f"Added new event{'s:' if len(lines) > 1 else ':'}\n" + "".join(f"{line}\n" for line in lines)
    if last is not None:
        out += f"\nYou can now use it in all perf tools, such as:\n\n\tperf record -e {last[0]}:{last[1]} -aR sleep 1\n\n"
    return out


def removed(group: str, event: str) -> str:
    return f"Removed event: {group}:{event}\n"


PROLOGUE_SKIPPED = ("Target program is compiled without optimization. Skipping prologue.\n"
                    "Probe on address 0x{entry:x} to force probing at the function entry.\n\n")
