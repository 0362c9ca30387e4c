"""The builder's variable tree data: roots and members from DWARF (a C program built here at -O0
and -O2) and from the running kernel's BTF, checked against perf -V and against the compiler."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kprobe_tui.probes.capture import (
    TYPE_CHOICES,
    btf_variables,
    children,
    dwarf_variables,
    next_type,
)
from kprobe_tui.probes.compile import compile_spec
from kprobe_tui.probes.spec import parse_spec

C_PROGRAM = Path(__file__).parents[1] / "tui" / "c" / "capture_prog.c"
BTF = Path("/sys/kernel/btf/vmlinux")


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("capture")
    paths = {}
    for level in ("-O0", "-O2"):
        paths[level] = str(out / f"prog{level}")
        subprocess.run(["gcc", level, "-g", "-o", paths[level], str(C_PROGRAM)], check=True)
    return paths


def roots(binary: str, place: str = "visit"):
    return dwarf_variables(parse_spec([place, "$params"], binary=binary, group="g"))


def by_name(nodes):
    return {node.name: node for node in nodes}


def perf_variables(binary: str, function: str) -> set[str]:
    """What ``perf probe -V`` lists as available there (the last word of each variable line)."""
    listed = subprocess.run(["perf", "probe", "-x", binary, "-V", function], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in listed.stdout.splitlines() if line.startswith("\t\t")}


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is the oracle")
@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_capturable_roots_are_what_perf_lists(builds, level):
    nodes = roots(builds[level])
    assert [n.name for n in nodes] == ["o", "depth", "label", "weight", "unused_after"]  # all shown, optimised out too
    assert {n.name for n in nodes if n.capturable} == perf_variables(builds[level], "visit")
    for node in nodes:
        assert node.capturable or "optimised out" in node.why_not


def test_at_O2_parameters_live_in_registers_and_locals_say_why_not(builds):
    nodes = by_name(roots(builds["-O2"]))
    assert [nodes[n].where for n in ("o", "depth", "label")] == ["register %di", "register %si", "register %dx"]
    assert nodes["weight"].where == "optimised out" and not nodes["weight"].capturable
    assert nodes["label"].argument == "label:string"  # char * is offered as a string
    assert nodes["o"].expandable and nodes["o"].reads_as == "x64"


def test_members_nested_anonymous_bitfields_unions_arrays(builds):
    o = by_name(roots(builds["-O0"]))["o"]
    members = by_name(children(o))
    assert list(members) == ["id", "in", "port", "family", "value", "tag", "name", "samples", "next"]  # anonymous struct flattened
    assert members["port"].expression == "o->port" and members["port"].reads_as == "s16"
    assert members["tag"].argument == "o->tag:string" and members["name"].argument == "o->name:string"
    assert members["samples"].reads_as == "s32[4]"
    assert not members["in"].capturable and members["in"].expandable  # a struct: expand it
    inner = by_name(children(members["in"]))
    assert inner["state"].expression == "o->in.state" and inner["state"].reads_as == "b3@0/32"
    assert inner["ready"].reads_as == "b1@3/32" and inner["ready"].type_name == "unsigned int : 1"
    union = by_name(children(members["value"]))
    assert union["as_int"].expression == "o->value.as_int" and union["as_float"].where == "+0"
    assert by_name(children(members["next"]))["id"].expression == "o->next->id"  # pointers keep expanding


def test_every_capturable_node_compiles_to_the_type_it_shows(builds):
    """The tree's "as TYPE" is what the compiler reads: tick anything, get what was shown."""
    binary = builds["-O0"]
    o = by_name(roots(binary))["o"]
    nodes = [*roots(binary), *children(o)]
    nodes += [kid for node in children(o) if node.expandable and node.name != "next" for kid in children(node)]
    checked = 0
    for node in nodes:
        if not node.capturable:
            continue
        [probe] = compile_spec(parse_spec(["visit", node.argument], binary=binary, group="g"), "g")
        assert probe.args[0].type == node.reads_as, node.expression
        checked += 1
    assert checked == 17


def test_return_probe_offers_retval_and_says_why_parameters_are_gone(builds):
    nodes = by_name(roots(builds["-O0"], "visit%return"))
    assert nodes["$retval"].capturable and nodes["$retval"].type_name == "long int"
    assert not nodes["o"].capturable and "uprobes cannot read arguments at function exit" in nodes["o"].why_not
    assert not nodes["weight"].capturable and "gone" in nodes["weight"].why_not


@pytest.mark.skipif(not BTF.exists(), reason="needs the running kernel's BTF")
def test_btf_prototype_and_members_of_struct_sock():
    nodes = by_name(btf_variables("tcp_sendmsg", BTF))
    assert list(nodes) == ["sk", "msg", "size"]
    assert nodes["sk"].where == "register %di" and nodes["sk"].type_name == "struct sock *" and nodes["sk"].expandable
    common = by_name(children(nodes["sk"]))["__sk_common"]
    assert common.expression == "sk->__sk_common" and not common.capturable
    members = by_name(children(common))
    assert "" not in members  # anonymous unions flattened: their members are listed instead
    state = members["skc_state"]
    assert state.expression == "sk->__sk_common.skc_state"
    # the compiler, reading member offsets from BTF itself (no README: no kernel-side names), agrees on the type
    [probe] = compile_spec(parse_spec(["tcp_sendmsg", state.argument]), "g", btf_path=BTF)
    assert probe.args[0].type == state.reads_as == "u8"
    assert re.fullmatch(r"\+\d+\(\+0\(%di\)\)|\+\d+\(%di\)", probe.args[0].fetch)
    reuse = members["skc_reuse"]  # a bitfield
    [probe] = compile_spec(parse_spec(["tcp_sendmsg", reuse.argument]), "g", btf_path=BTF)
    assert probe.args[0].type == reuse.reads_as and reuse.reads_as.startswith("b4@")
    at_exit = by_name(btf_variables("tcp_sendmsg", BTF, is_return=True))
    assert at_exit["$retval"].type_name == "int" and at_exit["sk"].where == "$arg1, saved at entry"


@pytest.mark.skipif(not BTF.exists(), reason="needs the running kernel's BTF")
def test_unknown_kernel_function_is_a_user_error():
    from kprobe_tui.errors import UserError

    with pytest.raises(UserError, match="'no_such_function_here': not in the kernel's BTF"):
        btf_variables("no_such_function_here", BTF)


def test_type_override_cycles_through_every_type_and_back_to_the_compilers_choice():
    seen, current = [], None
    for _ in TYPE_CHOICES:
        current = next_type(current)
        seen.append(current)
    assert seen[0] == "u8" and seen[-1] is None and "string" in seen and "symbol" in seen
    assert next_type(None, -1) == "symbol" and next_type("u8", -1) is None


KERNEL_DWARF = sorted(Path("/var/cache/kprobe-tui").glob("vmlinux-6.1.0-*-amd64"))  # see tests/debuginfo/kernel_debug.py


@pytest.mark.skipif(not KERNEL_DWARF, reason="needs the cached Debian 6.1 DWARF vmlinux")
def test_kernel_dwarf_route_offers_locals_and_the_file_name_as_a_string():
    vmlinux = str(KERNEL_DWARF[-1])
    spec = parse_spec(["do_sys_openat2", "$params"], group="g")
    nodes = by_name(dwarf_variables(spec, vmlinux))
    assert [nodes[n].where for n in ("dfd", "filename", "how")] == ["register %di", "register %si", "register %dx"]
    assert nodes["filename"].argument == "filename:string"
    assert not nodes["fd"].capturable and "optimised out" in nodes["fd"].why_not  # a local, not live at entry
    flags = by_name(children(nodes["how"]))["flags"]
    assert flags.expression == "how->flags"
    [probe] = compile_spec(parse_spec(["do_sys_openat2", flags.argument, nodes["filename"].argument]), "g", vmlinux=vmlinux)
    assert [arg.type for arg in probe.args] == [flags.reads_as, "string"]


def test_a_variable_whose_name_no_probe_can_spell_is_shown_not_tickable(tmp_path):
    """DWARF names are bytes: one with an escape sequence is listed (the tree escapes it) but cannot be
    ticked, so it never reaches the Args box (an Input shows its value raw) nor tracefs."""
    source = tmp_path / "odd.c"
    source.write_text("__attribute__((noinline)) int odd(int plainname, int oddnameX) { return plainname + oddnameX; }\n"
                      "int main(void) { return odd(1, 2); }\n")
    binary = tmp_path / "odd"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(binary), str(source)], check=True)
    data = binary.read_bytes()
    assert data.count(b"oddnameX\0") == 1
    binary.write_bytes(data.replace(b"oddnameX\0", b"odd\x1b[2JX\0"))
    nodes = {node.name: node for node in roots(str(binary), "odd")}
    assert nodes["plainname"].capturable
    assert not nodes["odd\x1b[2JX"].capturable and "not a C identifier" in nodes["odd\x1b[2JX"].why_not
