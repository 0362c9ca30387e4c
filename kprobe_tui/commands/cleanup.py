"""``kprobe-tui cleanup``: remove what kprobe-tui runs killed with SIGKILL left in the kernel."""

from __future__ import annotations

from kprobe_tui.kernel import funcgraph, sources
from kprobe_tui.kernel.events import Events


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("cleanup", help="remove probes, triggers, synthetic events and trace instances of dead kprobe-tui runs")
    parser.add_argument("--dry-run", "-n", action="store_true", help="only say what would be removed")
    parser.set_defaults(run=run)


def run(args) -> int:
    top = sources.from_args(args).tracing()
    events = Events(top)
    if args.dry_run:
        for name in events.stale_instances():
            print(f"would remove instance {name}")
        for event in events.stale_events():
            print(f"would remove {event.full_name}")
        for record in funcgraph.dead_runs():
            print(f"would give back the function_graph tracer that {record.stem} borrowed")
        return 0
    instances, removed = events.cleanup()
    graphs = funcgraph.restore_dead_runs(top)
    for name in graphs:
        print(f"gave back the function_graph tracer that {name} borrowed")
    for name in instances:
        print(f"removed instance {name}")
    for event in removed:
        print(f"removed {event.full_name}")
    if not (instances or removed or graphs):
        print("nothing to clean up")
    return 0
