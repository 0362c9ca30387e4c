"""`kprobe-tui probe` beside `/usr/bin/perf probe` on a program compiled here (issue 12 items 1 and 2).

Each lab command is run with perf, then with kprobe-tui in perf's place, on the same binary: the
uprobe_events lines they leave (addresses, fetch-arg locations and types, groups and names), the text
they print and their exit statuses must be the same, byte for byte. The binary's name is this test
run's own (``perflab_<pid>``), so the group both give it (``probe_perflab_<pid>``) is ours alone;
whatever a test creates it removes, and the fixture checks that the group is empty afterwards.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

PROJECT = Path(__file__).resolve().parents[2]
C_DIR = Path(__file__).parent / "c"
PERF = "/usr/bin/perf"
KPROBE_TUI = [sys.executable, "-m", "kprobe_tui"]
NAME = f"perflab_{os.getpid()}"
GROUP = f"probe_{NAME}"

# Lab definitions on perflab.c: the forms a perf probe tutorial uses (probe names below are perf's own).
DEFINITIONS = [
    "lab_recv c len flags:x",  # x with no width: the width of the value's type
    "lab_open path:string flags",
    "lab_open a=+0(%di):string",  # a raw fetch-arg, named
    "lab_open%return $retval",
    "lab_recv c->fd:s c->flags:x c->peer:string",  # members through a pointer, named after the last one
    "lab_recv c->peer[0]:char",
    "lab_recv:4 len c",  # a line relative to the function: lab_recv_L4
    "lab_recv+4 %di",
    "lab_recv;return*",  # the first line matching a pattern
    "lab_open;return*",  # a matching line at the function's entry address (gcc -O2): probed there
    "lab_open;*",  # every line of the function: its lines sharing the entry give one probe
    "perflab.c;return*",  # SRC;PTN: every matching line of the file, each named after its function
    "perflab.c;*",
    "lab_recv@perflab.c flags:u",
    "r=lab_recv len:x64",
    f"{GROUP}:myev=lab_open path:string",
    "lab_open $vars",
    "lab_recv $params",
]


def compiled(tmp_path_factory, source: str, name: str, optimise: str = "-O2") -> Path:
    """``tests/live/c/SOURCE`` built with -g for perf to read beside us (skipped without perf or gcc)."""
    if not os.access(PERF, os.X_OK) or shutil.which("gcc") is None:
        pytest.skip("needs /usr/bin/perf (linux-perf) and gcc")
    out = tmp_path_factory.mktemp("perf") / name
    subprocess.run(["gcc", "-g", optimise, "-o", str(out), str(C_DIR / source)], check=True)
    return out


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    return compiled(tmp_path_factory, "perflab.c", NAME)


@pytest.fixture
def clean(tracefs_root):
    """Fails the test if it leaves a probe in our group; removes any it left, so the next test starts clean."""
    yield
    left = ours(tracefs_root)
    remove(tracefs_root, left)
    assert left == [], "the test left probes behind"


def remove(root: Path, lines: list[str]) -> None:
    """Deletes the events of these uprobe_events lines: an event with several probes goes at once."""
    for event in dict.fromkeys(line.split()[0].split(":", 1)[1] for line in lines):
        control(root, f"-:{event}")


def control(root: Path, line: str) -> None:
    """One write appended to uprobe_events (O_APPEND without the seek Python's "a" mode makes, which tracefs refuses)."""
    fd = os.open(root / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def ours(root: Path) -> list[str]:
    return [line for line in (root / "uprobe_events").read_text().splitlines() if re.match(rf"^\w:{GROUP}/", line)]


def perf(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run([PERF, "probe", *words], capture_output=True, text=True, timeout=120)


def kprobe_tui(*words: str, command: str = "probe") -> subprocess.CompletedProcess:
    return subprocess.run([*KPROBE_TUI, command, *words], cwd=PROJECT, capture_output=True, text=True, timeout=120)


def same(words: list[str]) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    theirs, mine = perf(*words), kprobe_tui(*words)
    assert (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout), f"perf probe {' '.join(words)}: {mine.stderr}"
    return theirs, mine


@pytest.mark.parametrize("definition", DEFINITIONS)
def test_definitions_are_perfs(prog, definition):
    """-D: the uprobe_events line(s) perf would write, the same address, fetch-args, types and names."""
    theirs, _ = same(["-x", str(prog), "-D", definition])
    assert theirs.returncode == 0 and theirs.stdout, theirs.stderr


def added(root: Path, tool, words: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run an adding command; return what it printed and the lines it left in uprobe_events, then remove them."""
    done = tool(*words)
    lines = ours(root)
    remove(root, lines)
    return done, lines


@pytest.mark.parametrize("words", [
    ["-x", "{prog}", "lab_recv c len flags:x"],  # perf probe -x BIN 'func arg:x'
    ["-x", "{prog}", "lab_recv", "c", "len", "flags:x"],  # the same in several words
    ["-x", "{prog}", "--add", "lab_open a=+0(%si):string"],  # the whole probe in one quoted word
    ["-x", "{prog}", "lab_open%return $retval"],
    ["-x", "{prog}", "-a", "lab_open path:string", "-a", "lab_recv:4 len", "-a", "lab_open%return $retval"],
    ["-x", "{prog}", "-q", "lab_recv c->fd"],
    ["{prog}", "lab_recv len"],  # the program as the first word
    ["-x", "{prog}", "perflab.c;return*"],  # probes in three functions: three events, one per function
    ["-x", "{prog}", "perflab.c;*"],  # five lines of main appended to one event main
    ["-x", "{prog}", "lab_open;return*"],
])
def test_added_probes_and_their_text_are_perfs(tracefs_root, clean, prog, words):
    """The same uprobe_events lines (groups, names, places, fetch-args), the same 'Added new event' text
    on stderr (so the lab's next step, perf record -e GROUP:EVENT, is unchanged) and exit status."""
    words = [word.format(prog=prog) for word in words]
    theirs, their_lines = added(tracefs_root, perf, words)
    mine, my_lines = added(tracefs_root, kprobe_tui, words)
    assert theirs.returncode == 0 and their_lines, theirs.stderr
    assert my_lines == their_lines
    assert (mine.returncode, mine.stdout, mine.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)


def test_clashing_names_are_refused_then_numbered_with_force(tracefs_root, clean, prog):
    """perf: an existing event name is -EEXIST (exit 239) unless -f, which adds NAME_1; a second
    %return takes FUNC_1 (not FUNC__return_1)."""
    steps = [["-x", str(prog), "lab_open path:string"], ["-x", str(prog), "lab_open flags"],
             ["-f", "-x", str(prog), "lab_open flags"], ["-x", str(prog), "lab_open%return $retval"],
             ["-f", "-x", str(prog), "lab_open%return $retval"]]
    results = {}
    for tool in (perf, kprobe_tui):
        runs = [tool(*words) for words in steps]
        results[tool] = [r.returncode for r in runs], [r.stderr for r in runs if r.returncode == 0], ours(tracefs_root)
        assert tool("-q", "-d", f"{GROUP}:*").returncode == 0
        assert ours(tracefs_root) == []
    assert results[kprobe_tui] == results[perf]
    assert results[perf][0] == [0, 256 - 17, 0, 0, 0]
    assert [line.split()[0] for line in results[perf][2]] == [
        f"p:{GROUP}/lab_open", f"p:{GROUP}/lab_open_1", f"r:{GROUP}/lab_open__return", f"r:{GROUP}/lab_open_2"]


def test_list_and_delete_print_what_perf_prints(tracefs_root, clean, prog):
    """-l GROUP:* lists our probes as perf does (in its sorted order, with FUNC@FILE from the debug info),
    and -d with a glob and with GROUP:EVENT removes what perf would, saying what perf says."""
    for words in (["lab_recv c len flags:x"], ["lab_open%return $retval"], ["lab_open a=+0(%di):string"],
                  ["-f", "lab_open path:string"], ["lab_recv:4 len"]):
        assert kprobe_tui("-q", "-x", str(prog), *words).returncode == 0
    made = ours(tracefs_root)
    theirs, mine = same(["-l", f"{GROUP}:*"])
    assert theirs.returncode == 0 and len(theirs.stdout.splitlines()) == 5 and "perflab.c" in theirs.stdout
    theirs, mine = same(["-l", f"{GROUP}:lab_open*"])
    assert len(mine.stdout.splitlines()) == 3

    deletions = [["-d", f"{GROUP}:lab_open_*"], ["-d", f"{GROUP}:lab_recv"], ["--del", f"{GROUP}:*"], ["-d", f"{GROUP}:*"]]
    said = {}
    for tool in (perf, kprobe_tui):
        if not ours(tracefs_root):  # perf's turn came second: make the same probes again
            for line in made:
                control(tracefs_root, line)
        runs = [tool(*words) for words in deletions]
        said[tool] = [(r.returncode, r.stderr) for r in runs]
        assert ours(tracefs_root) == []
    assert said[kprobe_tui][:3] == said[perf][:3]
    assert said[perf][1][1] == f"Removed event: {GROUP}:lab_recv\n"
    # nothing left to delete: perf's message and -ENOENT; ours adds a hint on the next lines
    assert said[kprobe_tui][3][0] == said[perf][3][0] == 254
    assert said[kprobe_tui][3][1].startswith(f'"{GROUP}:*" does not hit any event.\n')


@pytest.mark.parametrize("words", [
    ["-L", "lab_recv"], ["-L", "lab_open"], ["-L", "lab_recv:2-4"], ["-L", "perflab.c:20-24"],
    ["-V", "lab_recv"], ["-V", "lab_open%return"], ["-V", "lab_recv:4"], ["-V", "lab_recv", "--externs"],
    ["-F", "lab_*"], ["-F", "main"], ["--funcs", "lab_*", "--filter", "main"],
    ["-V", "lab_recv", "-V", "lab_open"],
])
def test_lines_vars_and_funcs_print_what_perf_prints(prog, words):
    """-L, -V and -F on the program: stdout and exit status byte for byte."""
    theirs, _ = same(["-x", str(prog), *words])
    assert theirs.returncode == 0 and theirs.stdout


def test_funcs_lists_perfs_functions_without_its_data_symbols(prog):
    """perf's -F lists data symbols too (completed.0, data_start: a perf bug); kprobe-tui lists the same
    functions and leaves those out."""
    theirs, mine = perf("-x", str(prog), "-F"), kprobe_tui("-x", str(prog), "-F")
    assert mine.returncode == theirs.returncode == 0
    extra = set(theirs.stdout.split()) - set(mine.stdout.split())
    assert set(mine.stdout.split()) <= set(theirs.stdout.split())
    kinds = {line.split()[2]: line.split()[1] for line in subprocess.run(
        ["nm", str(prog)], capture_output=True, text=True, check=True).stdout.splitlines() if len(line.split()) == 3}
    assert extra and all(kinds[name] not in "tT" for name in extra), extra
    assert {"lab_open", "lab_recv", "main"} <= set(mine.stdout.split())


@pytest.mark.parametrize("words", [
    ["-a", "nosuch_function"],  # -ENOENT
    ["-V", "nosuch_function"],
    ["-a", "lab_open bad[arg"],  # bad syntax in -a: usage (129)
    ["lab_open bad[arg"],  # the same after the options: -EINVAL
    ["-V", "lab_open a"],  # --vars takes no arguments: usage
    ["-D", "lab_open"],  # -x after the probes: added below, -EINVAL
])
def test_failures_exit_as_perf_does(prog, words):
    words = ["-x", str(prog), *words] if words != ["-D", "lab_open"] else [*words, "-x", str(prog)]
    theirs, mine = perf(*words), kprobe_tui(*words)
    assert theirs.returncode != 0
    assert mine.returncode == theirs.returncode, mine.stderr


def test_target_options_work_before_or_after_probe(prog):
    """One grammar: -x before the command's name means what it means after it, for probe as for funcs."""
    before = subprocess.run([*KPROBE_TUI, "-x", str(prog), "probe", "-D", "lab_open path:string"], cwd=PROJECT,
                            capture_output=True, text=True, timeout=120)
    after = kprobe_tui("-x", str(prog), "-D", "lab_open path:string")
    assert before.returncode == after.returncode == 0
    assert before.stdout == after.stdout == perf("-x", str(prog), "-D", "lab_open path:string").stdout
    funcs = kprobe_tui("-x", str(prog), "lab_*", command="funcs")
    assert funcs.returncode == 0 and funcs.stdout.split() == ["lab_open", "lab_recv"]


def test_an_event_filter_that_does_not_parse_is_einval(prog):
    """kprobe-tui's --event-filter (perf has none): a filter that does not parse is an invalid argument (234),
    named with a caret, and nothing is made."""
    done = kprobe_tui("-n", "--event-filter", "len == 1 len", "-x", str(prog), "lab_recv len")
    assert done.returncode == 234 and "filter error at column" in done.stderr and "^" in done.stderr


# -- lazy patterns (;PTN) ---------------------------------------------------------------------------

LAZY_PATTERNS = [
    "lazy_len;return*",  # the function's one line shares its entry address when optimised
    "lazy_pick;return*", "lazy_pick;*lazy_clamp*", "lazy_pick;*",
    "lazy_clamp;return*", "lazy_clamp;*",  # inlined only: its copies in lazy_pick (-O0); none left (-O2)
    "lazylab.c;return*",  # SRC;PTN: lines in lazy_len, lazy_pick, main and the inlined lazy_clamp
    "lazylab.c;*lazy_clamp(*", "lazylab.c;*", "lazylab.c;{",
]


@pytest.fixture(scope="module", params=["-O0", "-O2"])
def lazy_prog(request, tmp_path_factory) -> Path:
    name = f"lazylab_{os.getpid()}{request.param.replace('-', '_')}"
    return compiled(tmp_path_factory, "lazylab.c", name, request.param)


@pytest.mark.parametrize("pattern", LAZY_PATTERNS)
def test_lazy_patterns_probe_what_perf_probes(lazy_prog, pattern):
    """FUNC;PTN and SRC;PTN (perf's find_probe_point_lazy): the same addresses in the same order (the line
    table walked by address, then each function's declaration and inlined call sites; an address once),
    named as perf names them (FUNC; for SRC;PTN the function or inlined copy the line is in); exit
    status as perf's where neither probes (an inline-only function at -O2)."""
    theirs, mine = perf("-x", str(lazy_prog), "-D", pattern), kprobe_tui("-x", str(lazy_prog), "-D", pattern)
    assert (mine.returncode, mine.stdout) == (theirs.returncode, theirs.stdout), mine.stderr


def test_a_pattern_matching_the_entry_line_probes_the_entry(prog):
    """lab_open's only statement shares the function's entry address (gcc -O2): FUNC:RLN refuses that line
    (perf: "This line is sharing the address with other lines"), but FUNC;PTN probes it at the entry."""
    theirs, _ = same(["-x", str(prog), "-D", "lab_open;return*"])
    assert theirs.stdout == perf("-x", str(prog), "-D", "lab_open").stdout
    assert perf("-x", str(prog), "-D", "lab_open:2").returncode == kprobe_tui("-x", str(prog), "-D", "lab_open:2").returncode == 254


def test_a_pattern_matching_no_line_is_refused_where_perf_probes_the_entry(prog):
    """A perf bug: when no line of the file matches, perf falls back to the function's symbol and probes its
    entry (exit 0), as if no pattern were given. No line of perflab.c has 'nothing' in it, so there is no
    line to probe: kprobe-tui refuses, naming the pattern, as perf does for SRC;PTN (exit 254)."""
    assert not any("nothing" in line for line in (C_DIR / "perflab.c").read_text().splitlines())
    theirs, mine = perf("-x", str(prog), "-D", "lab_open;*nothing*"), kprobe_tui("-x", str(prog), "-D", "lab_open;*nothing*")
    assert theirs.returncode == 0 and theirs.stdout == perf("-x", str(prog), "-D", "lab_open").stdout
    assert mine.returncode == 254 and mine.stdout == "" and "'*nothing*': no probeable line of lab_open matches" in mine.stderr
    assert perf("-x", str(prog), "-D", "perflab.c;*nothing*").returncode == kprobe_tui("-x", str(prog), "-D", "perflab.c;*nothing*").returncode == 254


@pytest.fixture(scope="module")
def rangelab(tmp_path_factory) -> Path:
    return compiled(tmp_path_factory, "rangelab.c", f"rangelab_{os.getpid()}")


@pytest.mark.parametrize("words", [
    ["-V", "range_walk", "--range"],  # [INV] locals whose location starts later; location lists; a static local
    ["-V", "range_walk:10", "--range"],  # inside the loop: block-scoped locals, an empty entry (64-64)
    ["-V", "range_walk:16", "--range"],
    ["-V", "range_mix", "--range"],  # an inlined copy: offsets from the function it was inlined into
    ["-V", "range_walk", "--range", "--externs"],  # globals as [EXT], without ranges
    ["-V", "range_walk", "-V", "range_mix", "--range"],
])
def test_vars_range_prints_what_perf_prints(rangelab, words):
    """-V --range: each variable as [VAL] (located at the address) or [INV] (a local located only later
    in the function), and where in the function it has a location: its location list's entries, or the
    ranges of its scope for a single expression; byte for byte, and so is `kprobe-tui vars --range`."""
    theirs, _ = same(["-x", str(rangelab), *words])
    assert theirs.returncode == 0 and "+[" in theirs.stdout
    if words.count("-V") == 1:
        mine = kprobe_tui("-x", str(rangelab), *[word for word in words if word != "-V"], command="vars")
        assert (mine.returncode, mine.stdout) == (0, theirs.stdout), mine.stderr
    if words[1] == "range_walk":
        assert re.search(r"\t\t\[INV\]\tlong int\tsum\t@<range_walk\+\[\d+-\d+,\d+-\d+", theirs.stdout)


def test_vars_range_filters_on_the_name_where_perf_filters_on_the_whole_line(rangelab):
    """perf 6.1 bug: with --range it matches --filter against the line after [VAL] ("long int\\tsum\\t@<...>"),
    so a variable's name never matches and perf says "(No matched variables)". kprobe-tui filters on the
    name, as without --range, and prints the very line perf prints for that variable unfiltered."""
    words = ["-x", str(rangelab), "-V", "range_walk", "--range"]
    everything = perf(*words).stdout
    theirs, mine = perf(*words, "--filter", "sum"), kprobe_tui(*words, "--filter", "sum")
    assert theirs.stdout.endswith("\t\t(No matched variables)\n")
    wanted = [line for line in everything.splitlines(keepends=True) if line.split("\t")[4:5] == ["sum"]]
    assert len(wanted) == 1
    assert (mine.returncode, mine.stdout) == (0, "".join(everything.splitlines(keepends=True)[:2] + wanted))


@pytest.fixture(scope="module")
def aggregate_prog(tmp_path_factory) -> Path:
    return compiled(tmp_path_factory, "aggregate.c", f"aggregate_{os.getpid()}")


@pytest.mark.parametrize("words", [["-V", "work:9"], ["-V", "work:9", "--range"], ["-V", "rec:31"]])
def test_vars_at_a_line_of_another_function_list_the_real_functions_variables(aggregate_prog, words):
    """work:9 is a line of sleep_ms (declared after work), inlined into nap and rec; rec:31 a line of main.
    No scope there is named work (or rec): perf then takes the real function (nap, rec, main) as the scope,
    and lists its variables (nap's ms, rec's depth, main's argc) besides the inlined copy's."""
    theirs, _ = same(["-x", str(aggregate_prog), *words])
    assert theirs.returncode == 0 and re.search(r"\t\t(\[VAL\]\t)?long int\t(ms|depth)\b|\tint\targc\n", theirs.stdout)


def test_the_builders_perf_line_runs_verbatim_in_perf_and_in_the_dropin(tracefs_root, clean, prog):
    """The perf command the builder shows and F3 copies, for a probe in this run's group: perf and
    ``kprobe-tui probe`` each run it as printed, and make the same probe (perf's group: the run's goes with it)."""
    from kprobe_tui.kernel import lifetime
    from kprobe_tui.probes import pipeline
    from kprobe_tui.probes.render import command_rows

    run_group = lifetime.run_name()
    request = pipeline.ProbeRequest(("lab_recv:4", "len"), binary=str(prog), run_group=run_group)
    plan = pipeline.plan(request, pipeline.ProbeTarget())
    assert plan.group == run_group
    [perf_line] = [command for label, command in command_rows(plan.spec, plan.probes[:1]) if label == "perf"]
    words = shlex.split(perf_line)
    assert words[:2] == ["perf", "probe"] and run_group not in perf_line
    theirs, their_lines = added(tracefs_root, perf, words[2:])
    mine, my_lines = added(tracefs_root, kprobe_tui, words[2:])
    assert theirs.returncode == mine.returncode == 0, mine.stderr
    assert my_lines == their_lines and their_lines[0].startswith(f"p:{GROUP}/{plan.probes[0].event} ")


def test_the_builders_tracefs_lines_run_verbatim_in_a_shell(tracefs_root, clean, tmp_path):
    """The tracefs lines the builder shows and F2 copies, for a line of four addresses with a filter: run by
    sh as printed, they make what the builder makes (every address under one event) and set the filter."""
    from kprobe_tui.kernel import lifetime
    from kprobe_tui.kernel.events import Events
    from kprobe_tui.kernel.tracefs import Tracefs
    from kprobe_tui.probes import pipeline
    from kprobe_tui.probes.render import command_rows

    lab = tmp_path / "lab"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(lab), str(PROJECT / "tests" / "tui" / "c" / "lab_walk.c")], check=True)
    group = lifetime.run_name()
    request = pipeline.ProbeRequest(("work:3", "total"), binary=str(lab), run_group=group, filter="total > 1",
                                    displayed=True)
    plan = pipeline.plan(request, pipeline.ProbeTarget())
    assert len(plan.probes) == 4
    lines = [command for label, command in command_rows(plan.spec, plan.probes, str(tracefs_root))
             if label in ("tracefs", "")]
    event = plan.probes[0].event
    try:
        done = subprocess.run(["sh", "-ec", "\n".join(lines)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        [made] = [e for e in Events(Tracefs(tracefs_root)).events_in(group) if e.event == event]
        def place_and_args(definition: str) -> list[str]:  # the kernel prints offsets zero-padded
            return re.sub(r":0x0*(?=[0-9a-f])", ":0x", definition).split()[1:]

        assert [place_and_args(d) for d in made.definitions] == [place_and_args(p.definition()) for p in plan.probes]
        assert (tracefs_root / f"events/{group}/{event}/filter").read_text().strip() == plan.spec.filter
    finally:
        if (tracefs_root / f"events/{group}/{event}").exists():
            control(tracefs_root, f"-:{group}/{event}")
