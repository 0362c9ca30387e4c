"""A probe's definition read back into the builder's fields (editing a probe), without root: definitions as
the kernel prints them, on a program compiled here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.events import kind_of, parse_definition
from kprobe_tui.probes.compile import ElfSymbols
from kprobe_tui.probes.edit import edit_target

C_PROGRAM = Path(__file__).parents[1] / "live" / "c" / "basic.c"


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("edit") / "prog"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(out), str(C_PROGRAM)], check=True)
    return out


def test_edit_target_reads_back_what_the_builder_needs(prog):
    """Uprobe entry/return/offset, kprobe, fprobe exit."""
    offset = ElfSymbols(prog).function("add3").file_offset
    uprobe = parse_definition(f"p:g/e {prog}:0x{offset + 4:016x} a=%di:s64", True)
    target = edit_target(uprobe, "common_pid != 7")
    assert (target.function, target.binary, target.kind, target.number, target.args) == (
        "add3", str(prog), "offset", "+4", "a=%di:s64")
    assert any("filter (common_pid != 7)" in lost for lost in target.lost)
    uret = parse_definition(f"r:g/e {prog}:0x{offset:x}", True)
    assert edit_target(uret).kind == "return"
    kret = parse_definition("r16:g/e do_sys_openat2+0 ret=$retval", False)
    assert (edit_target(kret).function, edit_target(kret).kind, edit_target(kret).args) == (
        "do_sys_openat2", "return", "ret=$retval")
    fexit = parse_definition("f:g/e vfs_read%return", None)
    assert (edit_target(fexit).function, edit_target(fexit).kind) == ("vfs_read", "fprobe_exit")
    with pytest.raises(UserError, match="synth"):
        edit_target(parse_definition("s:synthetic/lat u64 lat", None))


def test_what_the_builder_cannot_make_back_is_refused_with_the_reason(prog):
    with pytest.raises(UserError, match="placed by address"):
        edit_target(parse_definition("p:g/e 0xffffffff81000000", False))
    with pytest.raises(UserError, match="in no function of"):
        edit_target(parse_definition(f"p:g/e {prog}:0x0", True))


def test_kinds_in_words():
    words = [kind_of(parse_definition(line, None)) for line in (
        "p:g/a do_sys_openat2+0", "r:g/b do_sys_openat2+0", "p:g/c /bin/true:0x10", "r:g/d /bin/true:0x10",
        "f:g/e vfs_read", "f:g/f vfs_read%return", "t:g/h sched_switch", "e:g/i sched/sched_switch")]
    assert words == ["kprobe", "kretprobe", "uprobe", "uretprobe", "fprobe", "fexit", "tprobe", "eprobe"]
