"""Untrusted input stays data (issue 15): at most one definition per write, names the kernel takes,
paths tracefs can say, shell commands that parse back to their words, bounded filters and tails.

The kernel facts these checks encode are measured in tests/live (uprobes here) and
tests/kernel/test_untrusted_guest.py (kprobes in the 6.1 and 6.12 guests).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.cli import main as cli_main
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.instance import resolve_events
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs, entry_for, parse_error_log
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.form import BuildRequest, build_preview
from kprobe_tui.probes.pipeline import ProbeTarget
from kprobe_tui.probes.rawfetch import compile_raw
from kprobe_tui.probes.render import default_event_name, perf_hash, tracefs_commands
from kprobe_tui.probes.spec import MAX_EVENT_NAME_LEN, check_group, check_name, parse_arg, parse_spec
from kprobe_tui.stream import filterexpr

C_PROGRAM = Path(__file__).parents[1] / "tui" / "c" / "builder_prog.c"


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("untrusted") / "prog"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


@pytest.fixture
def fake_tracefs(tmp_path) -> Tracefs:
    """Plain files where tracefs has control files: what a write would have sent is what they hold."""
    for name in ("uprobe_events", "kprobe_events", "dynamic_events"):
        (tmp_path / name).write_text("")
    (tmp_path / "events/g/e").mkdir(parents=True)
    (tmp_path / "events/g/e/filter").write_text("")
    return Tracefs(tmp_path)


# --- item 1: one write, one command -------------------------------------------------------------

@pytest.mark.parametrize("text, why", [
    ("p:g/e /bin/true:0x1\n-:mygroup/x\n", "a newline (U+000A) at column 20"),
    ("p:g/e /bin/true:0x1\r-:mygroup/x", "a carriage return (U+000D)"),
    ("p:g/e /bin/true:0x1\tx=%di", "a tab (U+0009)"),
    ("p:g/e /bin/true:0x1 x=\x1b[2J", "an escape (U+001B)"),
    ("p:g/e /bin/true:0x1 x=\x85", "a control character (U+0085)"),
    ("p:g/e /bin/true:0x1 #x=%di", "after '#' as a comment"),
    ("p:g/e /tmp/\u00e0/prog:0x1", "byte 0xa0"),
])
def test_tracefs_write_refuses_anything_but_one_command(fake_tracefs, text, why):
    with pytest.raises(UserError) as refused:
        fake_tracefs.write("uprobe_events", text)
    assert why in refused.value.message
    assert fake_tracefs.read("uprobe_events") == ""  # nothing was written


def test_tracefs_write_takes_one_trailing_newline_and_the_kernels_line_length(fake_tracefs):
    fake_tracefs.write("uprobe_events", "p:g/e /bin/true:0x1\n")
    prefix = "p:g/long /bin/true:0x1 "
    line = prefix + "x" * (4094 - len(prefix))
    assert len(line) == 4094
    fake_tracefs.write("uprobe_events", line + "\n")
    with pytest.raises(KernelRefused, match="a line of 4095 bytes .* at most 4094 .*Line length is too long"):
        fake_tracefs.write("uprobe_events", line + "y\n")
    assert fake_tracefs.read("uprobe_events") == "p:g/e /bin/true:0x1\n" + line + "\n"


def test_filters_may_hold_hash_signs_but_not_more_than_a_page(fake_tracefs):
    fake_tracefs.write("events/g/e/filter", 'comm == "a#b"', append=False)
    fake_tracefs.write("events/g/e/filter", "n == 1" + " " * 4089, append=False)
    with pytest.raises(KernelRefused, match="a filter of 4096 bytes .* at most 4095"):
        fake_tracefs.write("events/g/e/filter", "n == 1" + " " * 4090, append=False)


def test_a_failed_definition_leaves_nothing_of_the_others(fake_tracefs, prog):
    """Every definition is checked before the first write: a bad second probe, nothing written."""
    good = compile_raw(parse_spec(["work"], binary=str(prog)), "kprobe_tui")
    bad = compile_raw(parse_spec(["helper"], binary=str(prog)), "kprobe_tui")
    object.__setattr__(bad, "event", "helper\n-:mygroup/x")  # as if a name came from somewhere unchecked
    with pytest.raises(UserError, match="newline"):
        Events(fake_tracefs).create([good, bad])
    assert fake_tracefs.read("uprobe_events") == ""


@pytest.mark.parametrize("arg", [
    "+0(%sp)", "-8(%bp):s32", "+u8(%di):u32", "+0(+8(%si)):string", "\\1234", "\\-1", "\\0x10:x64",
    '\\"it\'s":string', "+0(@counter)", "+16(@+4096):u64", "+0($stack):u64", "+0(%zz)",
])
def test_raw_fetch_args_in_the_kernels_grammar_pass(arg):
    assert parse_arg(arg).kind == "raw"


@pytest.mark.parametrize("arg", [
    "+0(%sp)\n-:mygroup/x\n#:u8",  # the reproduction
    "+0(%sp)\np:evil/y /path/prog:0x1184\n#:u8",
    "+0(%sp)';touch /tmp/x;'",
    "+0(%sp)junk", "+0(%sp) x=%di", "+0(%sp)#", "-:mygroup/x", "\\", "\\1 2", '\\"a b"', '\\"a#b"',
    "+0(%s p)", "+0()", "+x(%di)", "+0(%di", "+0(+0(+0(+0(+0(+0(+0(+0(+0(%di)))))))))",
])
def test_anything_else_starting_like_a_raw_fetch_arg_is_refused(arg):
    with pytest.raises(UserError):
        parse_spec(["work", arg], binary="/bin/true")


# --- item 18: names the kernel takes -------------------------------------------------------------

def test_names_of_63_characters_pass_and_64_are_refused_as_the_kernel_does():
    assert check_name("e" * 63, "event", MAX_EVENT_NAME_LEN) == "e" * 63
    with pytest.raises(UserError, match="64 characters, the kernel takes at most 63"):
        check_name("e" * 64, "event", MAX_EVENT_NAME_LEN)
    with pytest.raises(UserError, match="at most 63"):
        parse_spec([f"{'g' * 64}:ev=work"], binary="/bin/true")


@pytest.mark.parametrize("name, why", [
    ("café", "ASCII letters, digits and '_' only"),
    ("ev\n", "a newline"),
    ("ev x", "not a valid event name"),
    ("1ev", "not a valid event name"),
])
def test_names_are_ascii_identifiers(name, why):
    with pytest.raises(UserError, match=why):
        check_name(name, "event", MAX_EVENT_NAME_LEN)


def test_default_names_of_long_functions_are_cut_as_perf_cuts_them():
    # perf's own example (probe_trace_event__hash_event, perf 6.13): 46 characters, '_' and 8 hex digits
    long = "_Z62this_is_a_very_very_long_print_data_abcdefghijklmnopqrstuvwxyzi"
    assert default_event_name(parse_spec([long])) == "_Z62this_is_a_very_very_long_print_data_abcdef_91f40679"
    assert perf_hash(long) == "91f40679"
    names = {default_event_name(parse_spec([spelled])) for spelled in
             (long, long + "_other", f"{long}%return", f"{long}:12")}
    assert len(names) == 4  # the same first 46 characters, four names
    assert all(check_name(name, "event", MAX_EVENT_NAME_LEN) for name in names)
    assert default_event_name(parse_spec([f"{long}%return"])).endswith("__return")
    assert default_event_name(parse_spec(["café"], binary="/bin/true")) == "caf_"  # ASCII, as the kernel takes


def test_run_scoped_group_names_are_refused_wherever_a_user_names_a_group():
    for words, group in ((["kptui_99999:ev=work"], None), (["work"], "kptui_12"), (["kptui_7_2:ev=work"], None)):
        with pytest.raises(UserError, match="run-scoped"):
            parse_spec(words, binary="/bin/true", group=group and check_group(group))
    assert check_group(lifetime.run_name(), own=lifetime.run_name()) == lifetime.run_name()  # the builder's own
    request = BuildRequest("work", "/bin/true", "entry", group="kptui_99999")
    assert "run-scoped" in build_preview(request, ProbeTarget()).error.message


# --- item 2: paths tracefs can say ---------------------------------------------------------------

@pytest.mark.parametrize("directory, why", [
    ("a:0x1184\n-:mygroup/x\n#", "a newline"),
    ("my dir", "whitespace"),
    ("no\u00a0break", "whitespace"),
    ("hash#dir", "'#'"),
    ("\u00e0", "byte 0xa0"),
])
def test_paths_tracefs_cannot_say_are_refused_naming_the_path(tmp_path, prog, directory, why):
    hostile = tmp_path / directory
    hostile.mkdir(parents=True)
    (hostile / "prog").write_bytes(prog.read_bytes())
    with pytest.raises(UserError) as refused:
        parse_spec(["work"], binary=str(hostile / "prog"))
    assert why in refused.value.message and repr(str(hostile / "prog"))[:20] in refused.value.message
    assert "hard-link" in refused.value.hint


def test_the_path_written_is_the_file_named_resolved(tmp_path, prog):
    """``link/../prog`` is where the kernel would go (through the link), not what a lexical abspath says."""
    (tmp_path / "real/sub").mkdir(parents=True)
    (tmp_path / "real/prog").write_bytes(prog.read_bytes())
    (tmp_path / "prog").write_bytes(b"not this one")
    (tmp_path / "link").symlink_to(tmp_path / "real/sub")
    spec = parse_spec(["work"], binary=str(tmp_path / "link/../prog"))
    assert spec.binary == str(tmp_path / "real/prog")
    assert compile_raw(spec, "g").place.startswith(f"{tmp_path}/real/prog:0x")


# --- item 4: shell commands parse back to their words --------------------------------------------

def test_tracefs_commands_parse_back_to_the_definition_and_the_filter(prog):
    spec = parse_spec(["work", "x=\\1", "s=\\\"it's\":string"], binary=str(prog), filter="comm == 'bash' && x == 1")
    [probe] = compile_spec(spec, "kprobe_tui")
    define, set_filter = tracefs_commands(probe, spec.filter)
    assert shlex.split(define) == ["printf", "%s\\n", probe.definition(), ">>", "/sys/kernel/tracing/uprobe_events"]
    assert shlex.split(set_filter) == ["echo", spec.filter, ">", "/sys/kernel/tracing/events/kprobe_tui/work/filter"]


def test_the_builders_preview_is_quoted_as_well(prog):
    request = BuildRequest("work", str(prog), "entry", args="n=%si", filter="comm == 'bash'", lab=True,
                           group="kprobe_tui")
    preview = build_preview(request, ProbeTarget())
    assert preview.error is None
    rows = dict(preview.lines()[:2])
    assert shlex.split(rows["tracefs"])[1] == preview.probes[0].definition()
    assert shlex.split(rows[""]) == ["echo", "comm == 'bash'", ">",
                                     "/sys/kernel/tracing/events/kprobe_tui/work/filter"]
    handoff = [line for line in preview.admin if "| sudo sh -c" in line]
    assert [shlex.split(line)[1] for line in handoff] == [preview.probes[0].definition(), "comm == 'bash'"]


# --- item 13: bounded filters and tails ----------------------------------------------------------

def test_a_thousand_term_filter_is_a_clear_error_not_a_recursion_error():
    with pytest.raises(filterexpr.FilterError, match="1000 comparisons: at most 200"):
        filterexpr.parse(" && ".join(["n == 1"] * 1000))
    with pytest.raises(filterexpr.FilterError, match="nested more than 32 deep"):
        filterexpr.parse("(" * 500 + "n == 1" + ")" * 500)
    longest = filterexpr.parse(" || ".join(f"n == {i}" for i in range(200)))
    assert filterexpr.push_down(longest, {"e": {"n": "num"}}).kernel["e"].count("n ==") == 200


@pytest.mark.parametrize("options, message", [
    (["--duration", "nan"], "--duration nan: must be a positive number of seconds"),
    (["--duration", "inf"], "--duration inf: must be a positive number of seconds"),
    (["--duration", "-1"], "--duration -1.0: must be a positive number of seconds"),
    (["--max-events", "100000000000"], "--max-events 100000000000: must be 1 to 10,000,000"),
    (["--max-events", "0"], "--max-events 0: must be 1 to 10,000,000"),
])
def test_tail_refuses_durations_and_sizes_it_cannot_keep(capsys, options, message):
    assert cli_main(["tail", *options]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("pattern, message", [
    ("sched/", "'sched/' names group 'sched' but no event"),
    ("sched:", "'sched:' names group 'sched' but no event"),
    ("/", "'/' names neither a group nor an event"),
    ("/hit", "'/hit' has no group before the '/'"),
    ("../../instances/x/events/g/e", "no probe event matches"),
])
def test_tail_patterns_name_events_never_a_whole_subsystem(tmp_path, pattern, message):
    (tmp_path / "uprobe_events").write_text("p:g/hit /bin/true:0x1\n")
    for tracepoint in ("events/sched/sched_switch", "instances/x/events/g/e"):
        (tmp_path / tracepoint).mkdir(parents=True)
        (tmp_path / tracepoint / "enable").write_text("0")
    with pytest.raises(UserError, match=re.escape(message)):
        resolve_events(Events(Tracefs(tmp_path)), [pattern])
    assert resolve_events(Events(Tracefs(tmp_path)), ["sched/sched_switch"]) == [("sched", "sched_switch")]


# --- item 18: the kernel's words for our write, never a stale entry --------------------------------

FILTER_LOG = """\
[  348.446069] trace_uprobe: error: Invalid register name
  Command: p:x/y /bin/true:0x0 a=%zz
                                 ^
[  348.446538] event filter parse error: error: Field not found
  Command: nope == 1
                ^
"""


def test_filter_errors_are_parsed_and_matched_to_our_own_command():
    entry = parse_error_log(FILTER_LOG)
    assert (entry.source, entry.message, entry.command, entry.caret) == ("event filter parse error", "Field not found",
                                                                         "nope == 1", 5)
    before = FILTER_LOG.split("[  348.446538]")[0]
    assert entry_for(before, FILTER_LOG, "nope == 1").message == "Field not found"
    assert entry_for(before, FILTER_LOG, "n == 1 n == 2") is None  # someone else's new entry is not ours
    assert entry_for(FILTER_LOG, FILTER_LOG, "nope == 1") is None  # nor is an old one
    assert entry_for("", FILTER_LOG, "p:x/y  /bin/true:0x0 a=%zz\n").message == "Invalid register name"


# --- the property test: random hostile text at every entry point ----------------------------------

ALPHABET = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u00a0", "\u00e0", "é", " ", "'", '"', ";", "#",
            "-:", ":", "/", "=", "%", "$", "\\", "(", ")", "+", "-", "*", "@", "&", "|", "`", "kptui_1", "mygroup/x",
            "p:evil/y", "a", "Z", "_", "0", "9", "di", "sp", "0x10"]


# What a hostile user appends to an honest value: a second command, a comment, one word more.
PAYLOADS = ["\n-:mygroup/x\n#", "\np:evil/y /bin/true:0x0\n#", "\n", "\r", " x=%di", "#", "';touch /tmp/kptui-x;'"]


def hostile(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12)))


def spiced(rng: random.Random, usual: str, junk: float = 0.25, payload: float = 0.15) -> str:
    """``usual``; or random hostile text instead; or ``usual`` with a payload after it."""
    roll = rng.random()
    if roll < junk:
        return hostile(rng)
    return usual + rng.choice(PAYLOADS) if roll < junk + payload else usual


DEFINITION = re.compile(r"[pr]:(?P<group>[A-Za-z_]\w{0,62})/(?P<event>[A-Za-z_]\w{0,62}) (?P<place>\S+)"
                        r"(?: [A-Za-z_]\w{0,31}=[!-~]+)*", re.ASCII)


def test_random_hostile_text_never_makes_more_than_one_definition(tmp_path, prog):
    """Seeded: 3000 specs with random control characters, quotes, ';', '#', '-:' and spaces in the
    event name, the group, the args, the filter and the path; whatever parses, compiles and is
    written leaves at most one line, a single well-formed definition, and its filter."""
    rng = random.Random(15)
    hostile_dir = tmp_path / "paths"
    written = 0
    for case in range(3000):
        tracefs_dir = tmp_path / f"t{case % 4}"
        tracefs_dir.mkdir(exist_ok=True)
        (tracefs_dir / "uprobe_events").write_text("")
        binary = str(prog)
        maybe = lambda usual: spiced(rng, usual)  # noqa: E731
        if rng.random() < 0.1:  # the path itself
            directory = hostile_dir / hostile(rng).replace("/", "_").replace("\x00", "_")
            directory.mkdir(parents=True, exist_ok=True)
            binary = str(directory / "prog")
            if not os.path.exists(binary):
                os.link(prog, binary)
        words = [rng.choice(["work", "helper", f"{maybe('ev')}=work", f"{maybe('grp')}:{maybe('ev')}=work",
                             f"work{maybe('')}"])]
        words += [rng.choice(["%di", "+0(%sp)", maybe("%si"), f"+0(%sp){maybe('')}", f"\\{maybe('1')}",
                              f"{maybe('name')}=%si", f"s=\\\"{maybe('text')}\":string"]) for _ in range(rng.randint(0, 3))]
        group = rng.choice([None, "kprobe_tui", maybe("grp")])
        filter_text = rng.choice([None, "arg1 > 1", maybe("x"), f"comm == '{maybe('bash')}'"])
        try:
            spec = parse_spec(words, binary=binary, group=group or "kprobe_tui", filter=filter_text)
            probe = compile_raw(spec, spec.group).check()
            top = Tracefs(tracefs_dir)
            top.write(probe.control_file, probe.definition() + "\n")
            if spec.filter:
                (tracefs_dir / "events" / probe.group / probe.event).mkdir(parents=True, exist_ok=True)
                top.write(f"events/{probe.group}/{probe.event}/filter", spec.filter, append=False)
        except UserError:
            continue
        lines = (tracefs_dir / "uprobe_events").read_text().split("\n")
        assert len(lines) == 2 and lines[1] == "", lines
        assert DEFINITION.fullmatch(lines[0]), lines[0]
        assert lines[0] == probe.definition()
        if spec.filter:
            assert (tracefs_dir / "events" / probe.group / probe.event / "filter").read_text() == spec.filter
            assert "\n" not in spec.filter
        written += 1
    assert written > 200  # the generator does reach the kernel side, not only refusals


def test_random_hostile_text_in_the_builder_never_makes_more_than_one_definition(prog):
    """The builder's compile path: every box of the form gets random hostile text."""
    rng = random.Random(1515)
    maybe = lambda usual: spiced(rng, usual)  # noqa: E731
    compiled = 0
    for _ in range(1500):
        request = BuildRequest(
            rng.choice(["work", "helper"]), str(prog), rng.choice(["entry", "return", "offset"]),
            number=rng.choice(["", "4", maybe("8")]), args=rng.choice(["", "n", "+0(%sp)", maybe("%di"), f"x=\\{maybe('1')}"]),
            filter=rng.choice(["", "n > 1", maybe("n < 3"), f"comm == '{maybe('bash')}'"]),
            event=rng.choice(["", "ev", maybe("ev")]), group=rng.choice(["", "kprobe_tui", maybe("grp")]),
            lab=rng.random() < 0.3)
        preview = build_preview(request, ProbeTarget())
        if preview.error is not None:
            continue
        compiled += 1
        [probe] = preview.probes
        assert DEFINITION.fullmatch(probe.definition()), probe.definition()
        commands = [text for label, text in preview.lines() if label in ("tracefs", "")]
        written = [shlex.split(command)[-3] for command in commands]  # WRITER... TEXT >> FILE
        assert written == [probe.definition(), *([preview.spec.filter] if preview.spec.filter else [])]
    assert compiled > 200


def test_an_error_log_holding_bytes_that_are_not_utf8_does_not_stop_a_write(fake_tracefs):
    """Anyone's command lands in error_log as sent: a half character there must not break our writes."""
    fake_tracefs.path("error_log").write_bytes(b"[  1.0] trace_uprobe: error: Bad\n  Command: p:a/b /tmp/\xc3 x\n")
    fake_tracefs.write("uprobe_events", "p:g/e /bin/true:0x1\n")
    assert fake_tracefs.read("uprobe_events") == "p:g/e /bin/true:0x1\n"
