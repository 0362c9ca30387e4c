"""One probe pipeline: ``kprobe-tui probe`` and the TUI's builder give the same definitions and the same errors.

Each case is one probe asked both ways: the CLI's words (run as the command runs, in this process) and
the builder's form (kind, line or offset, Args, Filter), on a program compiled here (uprobes, DWARF)
and on the captured Debian 6.1 kernel (kprobes, BTF, the kernel's function list and blacklist).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kprobe_tui.cli import main as cli_main
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import DynamicEvent, Events
from kprobe_tui.kernel.snapshot import open_snapshot
from kprobe_tui.kernel.tracefs import Tracefs
from kprobe_tui.probes import pipeline
from kprobe_tui.probes.form import BuildRequest, build_preview

C_PROGRAM = Path(__file__).parents[1] / "tui" / "c" / "builder_prog.c"
SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pipeline") / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


@pytest.fixture(scope="module")
def kernel():
    return open_snapshot(SNAPSHOT)


def cli(capsys, *words: str) -> tuple[list[str] | None, str]:
    """``kprobe-tui ... probe --dry-run --json WORDS``: the definitions, or None and the error's first line."""
    code = cli_main([*words[:2], "probe", "--dry-run", "--json", *words[2:]] if words[0] == "--snapshot"
                    else ["probe", "--dry-run", "--json", *words])
    out, err = capsys.readouterr()
    if code != 0:
        assert code in (129, 234, 254), err  # perf probe's statuses: usage, -EINVAL, -ENOENT
        return None, err.removeprefix("kprobe-tui: ").splitlines()[0]
    return [probe["definition"] for probe in json.loads(out)], ""


@dataclass(frozen=True)
class PerfForm(BuildRequest):
    """The builder's form with its request in perf's dialect (perf's names and unsigned types), as the CLI's
    (``kprobe-tui probe`` is perf probe's command line): the one thing the CLI adds to the pipeline."""

    def probe_request(self) -> pipeline.ProbeRequest:
        return replace(super().probe_request(), dialect="perf")


def builder(request: BuildRequest, sources=None) -> tuple[list[str] | None, str]:
    """The builder's preview of the same probe, in the CLI's default group."""
    target = pipeline.ProbeTarget.of(sources, kernel=request.binary is None)
    preview = build_preview(request, target)
    if preview.error is not None:
        return None, preview.error.message
    return [probe.definition() for probe in preview.probes], ""


UPROBE_CASES = [  # (CLI words after -x PROG, the builder's kind, number, args, filter; the error, or "" for none)
    (["work", "rec->id", "n"], "entry", "", "rec->id n", "", ""),
    (["work:2", "sum", "rec->name:string"], "line", "2", "sum rec->name:string", "", ""),
    (["work+4", "%di"], "offset", "4", "%di", "", ""),
    (["work%return", "$retval"], "return", "", "$retval", "", ""),
    (["helper"], "entry", "", "", "", ""),
    (["work", "nosuch"], "entry", "", "nosuch", "", "'nosuch': no such variable at work"),
    (["work", "n:u7"], "entry", "", "n:u7", "", "'u7': unknown type"),
    (["work%return", "n"], "return", "", "n", "", "'n': uprobes cannot read arguments at function exit"),
    (["work", "n=%si:s32"], "entry", "", "n=%si:s32", "nosuch > 1",
     "'nosuch': this event has no such field"),
    (["work", "n=%si:s32"], "entry", "", "n=%si:s32", "n == 1 n",
     "filter error at column 8: expected && or || before 'n'"),
]


@pytest.mark.parametrize("words, kind, number, args, filter_text, error", UPROBE_CASES,
                         ids=[" ".join(case[0]) for case in UPROBE_CASES])
def test_uprobes_compile_the_same_from_the_command_line_and_the_builder(capsys, prog, words, kind, number, args,
                                                                        filter_text, error):
    from_cli = cli(capsys, "-x", str(prog), *(["--event-filter", filter_text] if filter_text else []), *words)
    function = words[0].split(":")[0].split("+")[0].split("%")[0]
    request = PerfForm(function, str(prog), kind, number, args, filter_text, group="probe_prog")
    assert builder(request) == from_cli
    definitions, message = from_cli
    assert message.startswith(error) and (definitions is None) == bool(error), message
    # perf's group and names: an offset probe is named after its function, as perf names it
    assert definitions is None or definitions[0].split()[0] in (f"p:probe_prog/{function}", f"r:probe_prog/{function}__return",
                                                                 f"p:probe_prog/{function}_L2")


def _blacklisted(sources) -> str:
    """A function the captured kernel blacklists by name, and that kallsyms lists."""
    names = {line.split()[2] for line in sources.kallsyms.read_text().splitlines() if line.split()[1] in "tT"}
    return next(line.split("\t")[1] for line in sources.blacklist.read_text().splitlines()
                if line.split("\t")[1] in names)


def test_kernel_probes_compile_and_fail_the_same_from_the_command_line_and_the_builder(capsys, kernel):
    blacklisted = _blacklisted(kernel)
    cases = [  # (CLI words, the builder's function, kind, args)
        (["vfs_read", "file", "count"], "vfs_read", "entry", "file count"),
        (["vfs_read%return", "$retval"], "vfs_read", "return", "$retval"),
        (["vfs_read", "%di", "$arg3"], "vfs_read", "entry", "%di $arg3"),
        (["vfs_read", "nosuch"], "vfs_read", "entry", "nosuch"),  # not a parameter
        (["no_such_function_here"], "no_such_function_here", "entry", ""),  # not in the kernel
        ([blacklisted], blacklisted, "entry", ""),  # the kernel refuses it
    ]
    results = []
    for words, function, kind, args in cases:
        from_cli = cli(capsys, "--snapshot", str(SNAPSHOT), *words)
        from_builder = builder(PerfForm(function, None, kind, args=args, group="probe"), kernel)
        assert from_builder == from_cli, words
        results.append(from_cli)
    assert [definitions is not None for definitions, _ in results] == [True, True, True, False, False, False]
    assert results[4][1] == "'no_such_function_here': no such kernel function"
    assert results[5][1].startswith(f"{blacklisted!r}: in the kprobe blacklist")


def test_several_probes_in_one_command_take_the_next_free_names(prog):
    """``also_taken``: names planned and not made yet step aside as those in the kernel do (perf's _1, _2)."""
    target = pipeline.ProbeTarget()
    first = pipeline.plan(pipeline.ProbeRequest(("work",), binary=str(prog)), target)
    second = pipeline.plan(pipeline.ProbeRequest(("work", "n"), binary=str(prog)), target,
                           also_taken=[p.event for p in first.probes])
    assert [p.event for p in first.probes + second.probes] == ["work", "work_1"]


def test_a_displayed_probe_leaves_our_own_pid_out_and_a_created_one_does_not(prog):
    target = pipeline.ProbeTarget()
    shown = pipeline.plan(pipeline.ProbeRequest(("work",), binary=str(prog), filter="comm == 'sh'", displayed=True),
                          target)
    made = pipeline.plan(pipeline.ProbeRequest(("work",), binary=str(prog), filter="comm == 'sh'"), target)
    assert shown.spec.filter == f"(comm == 'sh') && (common_pid != {os.getpid()})"
    assert made.spec.filter == "comm == 'sh'"


def test_create_refuses_what_the_guard_warns_about_until_confirmed(prog, tmp_path):
    """Nothing reaches tracefs unconfirmed: a plan whose advice needs confirmation is refused before any write."""
    (tmp_path / "uprobe_events").write_text("")
    events = Events(Tracefs(tmp_path))
    planned = pipeline.plan(pipeline.ProbeRequest(("work",), binary=str(prog)), pipeline.ProbeTarget())
    planned.advice.needs_confirmation = True
    with pytest.raises(pipeline.GuardUnconfirmed, match="on the SSH output path"):
        pipeline.create(planned, events)
    assert (tmp_path / "uprobe_events").read_text() == ""
    made = pipeline.create(planned, events, confirmed=True)
    assert made == [DynamicEvent("p", "kprobe_tui", "work", planned.probes[0].definition(), True, made=True)]
    assert (tmp_path / "uprobe_events").read_text() == planned.probes[0].definition() + "\n"


def test_an_unreadable_tracefs_is_an_error_only_when_creating(tmp_path):
    """A dry run (and lab mode) compiles without tracefs; creating must not guess what the kernel has."""
    (tmp_path / "README").mkdir()  # read() fails: as tracefs does for a user who may not read it
    assert pipeline.ProbeTarget(Tracefs(tmp_path)).readme == ""
    with pytest.raises(UserError, match="cannot read"):
        pipeline.ProbeTarget(Tracefs(tmp_path), strict=True).readme  # noqa: B018  (reading it is what raises)
