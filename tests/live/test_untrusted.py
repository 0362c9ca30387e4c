"""Issue 15 on the real tracefs: hostile arguments, paths and names never put more than the one
definition asked for into the kernel, and an administrator's probe ``mygroup/x`` survives them all.

Each reproduction is the issue's own command, run as ``kprobe-tui`` runs it, on a program compiled
here; the uprobe_events lines of other engineers' tests (running meanwhile) are left out of every check.
"""

from __future__ import annotations

import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.cli import main as cli_main
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import lifetime
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.tracefs import KernelRefused, Tracefs
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.form import BuildRequest, build_preview
from kprobe_tui.probes.pipeline import ProbeTarget
from kprobe_tui.probes.render import admin_handoff
from kprobe_tui.probes.spec import parse_spec
from kprobe_tui.probes.symbols import ElfSymbols
from tests.unit.test_admin_handoff import run_as_admin
from tests.unit.test_untrusted_input import spiced

pytestmark = pytest.mark.live

C_PROGRAM = Path(__file__).parents[1] / "tui" / "c" / "builder_prog.c"
LONG_FUNCTION = "work_with_a_name_far_longer_than_the_sixty_three_characters_a_kernel_event_takes"
VICTIM = "mygroup/x"
PERF_FAILED = (129, 234, 254)  # kprobe-tui probe exits as perf probe: usage, -EINVAL, -ENOENT


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    """``prog`` with ``work(struct rec *, int)``, as in the issue, and a function with a 82-character name."""
    directory = tmp_path_factory.mktemp("kptui-untrusted")
    source = directory / "prog.c"
    source.write_text(C_PROGRAM.read_text().replace(
        "int main(", f"__attribute__((noinline)) int {LONG_FUNCTION}(int n) {{ return n + 1; }}\n\nint main("))
    subprocess.run(["gcc", "-g", "-O0", "-o", str(directory / "prog"), str(source)], check=True)
    return directory / "prog"


def ours(root: Path, binary: Path) -> list[str]:
    """uprobe_events lines on our program, and any line of the groups a hostile input names."""
    lines = (root / "uprobe_events").read_text(errors="replace").splitlines()
    return sorted(line for line in lines if str(binary.parent) in line or line.split()[0].split(":")[1].startswith(
        ("evil/", "mygroup/", "kptuifuzz")))


@pytest.fixture
def victim(prog, tracefs_root):
    """The administrator's ``mygroup/x`` on our program (made by hand, as an admin would), and a check that
    after the test the kernel holds exactly what it held before."""
    top = Tracefs(tracefs_root)
    offset = ElfSymbols(prog).function("helper").file_offset
    top.write("uprobe_events", f"p:{VICTIM} {prog}:0x{offset:x}\n")
    before = ours(tracefs_root, prog)
    try:
        yield top
        assert ours(tracefs_root, prog) == before
    finally:
        for line in ours(tracefs_root, prog):
            top.write("uprobe_events", f"-:{line.split()[0].split(':')[1]}\n")


def probe(*args: str) -> tuple[int, str, str]:
    """``kprobe-tui ARGS`` in a process of its own: exit status, stdout, stderr."""
    done = subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


# --- item 1: the reproductions -----------------------------------------------------------

@pytest.mark.parametrize("payload", ["+0(%sp)\n-:mygroup/x\n#:u8", "+0(%sp)\np:evil/y {prog}:0x1184\n#:u8",
                                     "+0(%sp)\nbogus\n#:u8"],
                         ids=["deletes-mygroup-x", "creates-evil-y", "fails-after-ours"])
def test_a_raw_fetch_arg_cannot_carry_a_second_command(prog, victim, payload):
    """Before: success, ``mygroup/x`` deleted (or ``evil/y`` made, or our probe left behind by a failed
    later line). Now: refused before anything is written. As perf does, a probe's words are split at any
    whitespace, a newline too, so the payload is several arguments, and the first bad one is named."""
    code, out, err = probe("probe", "-g", "kprobe_tui", "-x", str(prog), "work", payload.format(prog=prog))
    assert code == 234, out  # perf's -EINVAL for a definition after the options
    assert "Traceback" not in err and err.startswith("kprobe-tui: '") and ("unknown type" in err or "#:u8" in err)
    uprobes = victim.read("uprobe_events")
    assert VICTIM in uprobes and "evil/y" not in uprobes and "kprobe_tui/work " not in uprobes


# --- item 2: -x paths ----------------------------------------------------------------------------

def test_a_path_with_a_newline_is_refused_by_the_cli(prog, victim, tmp_path):
    hostile = tmp_path / "a:0x1184\n-:mygroup/x\n#"
    hostile.mkdir(parents=True)
    os.link(prog, hostile / "prog")
    code, out, err = probe("probe", "-g", "kprobe_tui", "-x", str(hostile / "prog"), "work")
    assert code in PERF_FAILED, out
    assert "tracefs cannot name this file" in err and "a newline (U+000A)" in err and "hard-link" in err
    assert VICTIM in victim.read("uprobe_events")


def test_a_path_with_spaces_is_refused_and_its_hard_link_is_probed(prog, victim, tmp_path, tracefs_root):
    spaced = tmp_path / "my programs" / "prog"
    spaced.parent.mkdir()
    os.link(prog, spaced)
    code, _, err = probe("probe", "-g", "kprobe_tui", "-x", str(spaced), "work")
    assert code in PERF_FAILED and "whitespace" in err and repr(str(spaced)) in err
    plain = tmp_path / "prog"
    os.link(spaced, plain)  # what the hint says: the same inode, a path tracefs can say
    code, out, err = probe("probe", "-g", "kprobe_tui", "-x", str(plain), "work")
    try:
        assert code == 0, err
        assert f"p:kprobe_tui/work {plain}:0x" in victim.read("uprobe_events")
    finally:
        victim.write("uprobe_events", "-:kprobe_tui/work\n")


# --- item 3: run-scoped names and del ------------------------------------------------------------

def test_a_run_scoped_group_cannot_be_named_in_a_spec(prog, victim):
    code, _, err = probe("probe", "-g", "kprobe_tui", "-x", str(prog), "kptui_99999:ev=work")
    assert code in PERF_FAILED and "run-scoped" in err
    code, _, err = probe("probe", "-x", str(prog), "-g", "kptui_1_2", "work")
    assert code in PERF_FAILED and "run-scoped" in err
    assert "kptui_99999" not in victim.read("uprobe_events")


def test_del_with_a_group_glob_asks_before_removing_others_probes(prog, victim):
    code, out, err = probe("del", "mygr*/*")
    assert code == 2, out
    assert "'mygr*/*' matches 1 events in groups that are not kprobe-tui's (mygroup)" in err and "--force" in err
    assert VICTIM in victim.read("uprobe_events")
    code, out, err = probe("del", "--force", "mygr*/*")
    assert code == 0 and f"removed {VICTIM}" in out, err
    victim.write("uprobe_events", f"p:{VICTIM} {prog}:0x{ElfSymbols(prog).function('helper').file_offset:x}\n")
    code, out, err = probe("del", "mygroup/*")  # a group named outright needs no --force
    assert code == 0 and f"removed {VICTIM}" in out, err
    victim.write("uprobe_events", f"p:{VICTIM} {prog}:0x{ElfSymbols(prog).function('helper').file_offset:x}\n")


# --- item 4: shell commands ----------------------------------------------------------------------

def test_printed_commands_parse_back_and_the_hand_off_writes_exactly_what_it_says(prog, victim, tracefs_root, tmp_path):
    """``--filter "comm == 'bash'"`` and a backslash immediate: the tracefs lines of ``probe -n`` split
    back to their words, and the hand-off, run by a root shell, makes that probe and that filter only."""
    marker = tmp_path / "x"
    code, _, err = probe("probe", "-g", "kprobe_tui", "-n", "-x", str(prog), "work", f"+0(%sp)';touch {marker};'")
    assert code in PERF_FAILED and not marker.exists(), err  # refused: not one fetch-arg
    code, out, err = probe("probe", "-g", "kprobe_tui", "-n", "--explain", "--event-filter", "comm == 'bash' && one == 1",
                           "-x", str(prog), "work", "one=\\1")
    assert code == 0, err
    [define, set_filter] = [line.split(None, 1)[1] if line.startswith("  tracefs:") else line.strip()
                            for line in out.splitlines() if "tracefs:" in line or "/filter" in line]
    definition = f"p:kprobe_tui/work {prog}:0x{ElfSymbols(prog).function('work').file_offset:x} one=\\1"
    assert shlex.split(define) == ["printf", "%s\\n", definition, ">>", f"{tracefs_root}/uprobe_events"]
    assert shlex.split(set_filter) == ["echo", "comm == 'bash' && one == 1", ">",
                                       f"{tracefs_root}/events/kprobe_tui/work/filter"]

    spec = parse_spec(["work", "one=\\1"], binary=str(prog), group="kprobe_tui", filter="comm == 'bash' && one == 1")
    probes = compile_spec(spec, "kprobe_tui")
    handoff = [line for line in admin_handoff(spec, probes, "student", str(tracefs_root)) if "| sudo sh -c" in line]
    try:
        for line in handoff:
            run_as_admin(line, tmp_path / "bin")
        work = ElfSymbols(prog).function("work").file_offset
        assert [line for line in ours(tracefs_root, prog) if not line.startswith(f"p:{VICTIM} ")] == [
            f"p:kprobe_tui/work {prog}:0x{work:016x} one=\\1"]
        assert victim.read("events/kprobe_tui/work/filter").strip() == "comm == 'bash' && one == 1"
    finally:
        victim.write("uprobe_events", "-:kprobe_tui/work\n")


# --- item 18: names, filters and line lengths, as the kernel takes them ----------------------------

def test_the_kernel_takes_63_character_names_and_we_refuse_64_before_it(prog, victim, tracefs_root):
    offset = ElfSymbols(prog).function("helper").file_offset
    for group, event in (("g" * 63, "ev"), ("mygroup", "e" * 63)):
        victim.write("uprobe_events", f"p:{group}/{event} {prog}:0x{offset:x}\n")
        victim.write("uprobe_events", f"-:{group}/{event}\n")
    for group, event in (("g" * 64, "ev"), ("mygroup", "e" * 64)):
        with pytest.raises(KernelRefused) as refused:
            victim.write("uprobe_events", f"p:{group}/{event} {prog}:0x{offset:x}\n")
        assert refused.value.log.message in ("Group name is too long", "Event name is too long")
    code, _, err = probe("probe", "-g", "kprobe_tui", "-x", str(prog), f"{'e' * 64}=work")
    assert code in PERF_FAILED and "64 characters, the kernel takes at most 63" in err


def test_a_long_function_gets_a_valid_default_name(prog, victim):
    code, out, err = probe("probe", "-g", "kprobe_tui", "-x", str(prog), LONG_FUNCTION)
    name = f"{LONG_FUNCTION[:46]}_"
    try:
        assert code == 0, err
        assert f"kprobe_tui:{name}" in err  # perf's "Added new event" text, on stderr as perf prints it
        code, out, err = probe("probe", "-g", "kprobe_tui", "-x", str(prog), f"{LONG_FUNCTION}%return")
        assert code == 0, err
        assert f"kprobe_tui:{name}" in err and "__return" in err
    finally:
        for line in victim.read("uprobe_events").splitlines():
            if f"kprobe_tui/{name}" in line:
                victim.write("uprobe_events", f"-:{line.split()[0].split(':')[1]}\n")


def test_filter_errors_are_the_kernels_words_for_this_filter(prog, victim):
    # someone else's refusal lands in error_log first: it must not be taken for ours
    with pytest.raises(KernelRefused):
        victim.write("uprobe_events", f"p:mygroup/stale {prog}:0x0 a=%nosuchreg\n")
    code, _, err = probe("probe", "-g", "kprobe_tui", "--event-filter", "comm == 1", "-x", str(prog), "work", "n=%si:s32")  # our grammar takes it
    assert code in PERF_FAILED
    assert "Expecting string field" in err and "Invalid register" not in err
    assert "kprobe_tui/work" not in victim.read("uprobe_events")  # the probe went with its filter
    code, _, err = probe("probe", "-g", "kprobe_tui", "--event-filter", "n == 1 n == 2", "-x", str(prog), "work", "n=%si:s32")
    assert code in PERF_FAILED and "filter error at column 8: expected && or || before 'n'" in err  # ours, before the kernel
    code, _, err = probe("probe", "-g", "kprobe_tui", "--event-filter", f'comm == "{"x" * 5000}"', "-x", str(prog), "work", "n=%si:s32")
    assert code in PERF_FAILED and "the kernel takes at most 4095 in a filter file" in err
    assert "kprobe_tui/work" not in victim.read("uprobe_events")


def test_a_line_longer_than_the_kernel_takes_is_refused_in_its_words(prog, victim, tracefs_root):
    offset = ElfSymbols(prog).function("helper").file_offset
    head = f"p:mygroup/long {prog}:0x{offset:x}"

    def line(length: int) -> str:  # arguments of 30 characters: the kernel takes 63 in one
        text = head
        while len(text) + 31 <= length - 12:
            text += f" a{len(text):05d}=+0x{'0' * 16}(%di)"
        return text + " z=+0x" + "0" * (length - len(text) - 11) + "(%di)"

    victim.write("uprobe_events", line(4094) + "\n")  # the longest line the kernel takes
    victim.write("uprobe_events", "-:mygroup/long\n")
    fd = os.open(tracefs_root / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:  # one byte more, and the kernel says EINVAL (its words are in dmesg only)
        with pytest.raises(OSError):
            os.write(fd, (line(4095) + "\n").encode())
    finally:
        os.close(fd)
    with pytest.raises(KernelRefused, match="a line of 4095 bytes .* at most 4094 .*Line length is too long"):
        victim.write("uprobe_events", line(4095) + "\n")


# --- item 13: tail ---------------------------------------------------------------------------------

def test_tail_refuses_a_subsystem_and_a_thousand_terms_and_leaves_no_instance(prog, victim, tracefs_root):
    for pattern, message in (("sched/", "'sched/' names group 'sched' but no event"),
                             ("/", "'/' names neither a group nor an event")):
        code, _, err = probe("tail", pattern, "--duration", "1")
        assert code == 2 and message in err
    assert cli_main(["tail", VICTIM, "--duration", "1", "--filter", " && ".join(["comm == \"x\""] * 1000)]) == 2
    assert lifetime.run_name() not in os.listdir(tracefs_root / "instances")


# --- the property test, on the kernel ---------------------------------------------------------------

def test_random_hostile_arguments_reach_the_kernel_as_one_definition_at_most(prog, victim, tracefs_root):
    """Seeded: 400 ``kprobe-tui probe`` runs (in this process) with hostile names, groups, args, filters
    and paths; after each, uprobe_events holds the victim and at most the one probe that run reported."""
    rng = random.Random(1515)
    spice = lambda usual: spiced(rng, usual, junk=0.2, payload=0.3)  # noqa: E731
    base = ours(tracefs_root, prog)
    made = 0
    for case in range(400):
        binary = str(prog)
        if rng.random() < 0.15:
            directory = prog.parent / f"fuzz{case}" / spice("plain").replace("/", "_").replace("\x00", "_")
            directory.mkdir(parents=True, exist_ok=True)
            binary = str(directory / "prog")
            os.link(prog, binary)
        group = rng.choice(["kptuifuzz", spice("kptuifuzz")])
        args = ["probe", "--json", "-x", binary, "-g", group, rng.choice(["work", f"{spice('ev')}=work", f"work{spice('')}"])]
        args += [rng.choice(["n=%si:s32", spice("+0(%sp)"), f"x=\\{spice('1')}", f"s=\\\"{spice('t')}\":string"])
                 for _ in range(rng.randint(0, 2))]
        if rng.random() < 0.5:
            args += ["--filter", rng.choice(["n > 1", spice("n < 3"), f"comm == '{spice('bash')}'"])]
        try:
            code = cli_main(args)
        except SystemExit as exc:  # argparse: an option-like word
            code = exc.code
        after = ours(tracefs_root, prog)
        added = [line for line in after if line not in base]
        assert not [line for line in base if line not in after], f"case {case} removed a probe: {args!r}"
        assert len(added) <= 1 and (code == 0) == (len(added) == 1), (case, args, added)
        for line in added:
            name = line.split()[0].split(":")[1]
            assert name.startswith("kptuifuzz/") or group != "kptuifuzz", line
            victim.write("uprobe_events", f"-:{name}\n")
            made += 1
    assert made >= 20


def test_random_hostile_builder_forms_reach_the_kernel_as_one_definition_at_most(prog, victim, tracefs_root):
    """Seeded: 300 forms of the builder with hostile text in every box, compiled and created as Create does
    (run-scoped); after each, uprobe_events holds the victim and at most the one probe created."""
    rng = random.Random(2424)
    spice = lambda usual: spiced(rng, usual, junk=0.2, payload=0.3)  # noqa: E731
    events = Events(victim)
    target = ProbeTarget(victim)
    base = ours(tracefs_root, prog)
    made = 0
    for case in range(300):
        request = BuildRequest(
            rng.choice(["work", "helper"]), str(prog), rng.choice(["entry", "return", "offset"]),
            number=spice("4"), args=rng.choice(["", "n", spice("+0(%sp)"), shlex.quote(f"x=\\{spice('1')}")]),
            filter=rng.choice(["", "", spice("common_pid > 1"), f"comm == '{spice('bash')}'"]),
            event=rng.choice(["", spice("ev")]),
            group=rng.choice(["", lifetime.run_name(), spice("kptuifuzz")]))
        preview = build_preview(request, target)
        created = []
        if preview.error is None:
            try:
                created = events.create(preview.probes, run_scoped=True)
            except UserError:
                pass
        after = ours(tracefs_root, prog)
        assert not [line for line in base if line not in after], f"case {case} removed a probe: {request!r}"
        added = [line for line in after if line not in base]
        assert len(added) == len(created) <= 1, (case, request, added)
        for event in created:
            events.delete(event)
            made += 1
    assert made >= 20
