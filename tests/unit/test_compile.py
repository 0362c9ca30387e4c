"""Location expressions -> fetch-args, the BTF compiler on this machine's BTF, and the feedback guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.probes import guard
from kprobe_tui.probes.compile import compile_btf
from kprobe_tui.probes.locations import Located, NotExpressible, Value, evaluate
from kprobe_tui.probes.spec import parse_spec

BTF = Path("/sys/kernel/btf/vmlinux")
needs_btf = pytest.mark.skipif(not BTF.exists(), reason="this kernel exposes no BTF")


def at(ops, **kwargs):
    kwargs.setdefault("absolute", lambda address: f"@sym+{address}")
    return evaluate(ops, "v", **kwargs)


@pytest.mark.parametrize(
    "ops, located",
    [
        ([("DW_OP_reg5", [])], Located(value="%di")),
        ([("DW_OP_regx", [12])], Located(value="%r12")),
        ([("DW_OP_breg7", [16])], Located(address=Value("%sp", 16))),
        ([("DW_OP_bregx", [6, -24])], Located(address=Value("%bp", -24))),
        # a dereference chain with a constant offset: *(rdi + 8) + 16
        ([("DW_OP_breg5", [8]), ("DW_OP_deref", []), ("DW_OP_plus_uconst", [16])], Located(address=Value("+8(%di)", 16))),
        ([("DW_OP_breg4", [0]), ("DW_OP_stack_value", [])], Located(value="%si")),
        ([("DW_OP_lit7", []), ("DW_OP_stack_value", [])], Located(value="\\7")),
        ([("DW_OP_addr", [4096])], Located(address=Value(None, 4096))),
        ([("DW_OP_addr", [4096]), ("DW_OP_deref", [])], Located(address=Value("@sym+4096", 0))),
        ([("DW_OP_breg3", [0]), ("DW_OP_piece", [8])], Located(address=Value("%bx", 0))),
        ([("DW_OP_breg5", [4]), ("DW_OP_lit8", []), ("DW_OP_plus", [])], Located(address=Value("%di", 12))),
    ],
)
def test_location_expressions(ops, located):
    assert at(ops) == located


def test_fbreg_goes_through_the_frame_base_and_the_cfa():
    cfa = Value("%sp", 8)
    assert at([("DW_OP_fbreg", [-20])], frame_base=lambda: cfa) == Located(address=Value("%sp", -12))
    assert at([("DW_OP_call_frame_cfa", [])], cfa=lambda: cfa) == Located(address=cfa)


@pytest.mark.parametrize(
    "ops, reason",
    [
        ([("DW_OP_breg5", [0]), ("DW_OP_breg4", [0]), ("DW_OP_plus", [])], "adds two runtime values"),
        ([("DW_OP_breg5", [8]), ("DW_OP_stack_value", [])], "cannot add to a value"),
        ([("DW_OP_entry_value", [[0x55]]), ("DW_OP_stack_value", [])], "at function entry"),
        ([("DW_OP_reg5", []), ("DW_OP_piece", [4]), ("DW_OP_reg4", []), ("DW_OP_piece", [4])], "pieces"),
        ([("DW_OP_breg5", [0]), ("DW_OP_neg", [])], "DW_OP_neg"),
        ([("DW_OP_fbreg", [-8])], "frame base"),
        ([("DW_OP_reg17", [])], "no tracefs name"),
    ],
)
def test_inexpressible_locations_are_refused_with_the_reason(ops, reason):
    with pytest.raises(NotExpressible, match=reason) as refused:
        at(ops)
    assert refused.value.message.startswith("v: ")


@needs_btf
def test_btf_compiles_members_to_register_offsets():
    btf = Btf.load(BTF)
    sock = btf.find_type("struct sock")
    [*_, state] = btf.find_member(sock, "__sk_common.skc_state")
    probe = compile_btf(parse_spec(["tcp_recvmsg", "sk->__sk_common.skc_state", "len"]), "g", btf_path=BTF)
    assert probe.definition() == f"p:g/tcp_recvmsg tcp_recvmsg+0 skc_state=+{state.byte_offset}(%di):u8 len=%dx:u64"


@needs_btf
def test_btf_passes_names_through_where_the_kernel_resolves_them():
    readme = "fetcharg: (%<register>|$<efield>), @<address>, @<symbol>[+|-<offset>], $arg<N>, <argname>"
    probe = compile_btf(parse_spec(["tcp_recvmsg", "sk->sk_rcvbuf", "len", "$arg3"]), "g", readme=readme, btf_path=BTF)
    assert [a.fetch for a in probe.args] == ["sk->sk_rcvbuf", "len", "$arg3"]


@needs_btf
def test_btf_params_and_refusals():
    probe = compile_btf(parse_spec(["vfs_read", "$params"]), "g", btf_path=BTF)
    assert [(a.name, a.fetch) for a in probe.args] == [("file", "%di"), ("buf", "%si"), ("count", "%dx"), ("pos", "%cx")]
    with pytest.raises(UserError, match="'nosuch': not a parameter of"):
        compile_btf(parse_spec(["vfs_read", "nosuch"]), "g", btf_path=BTF)
    with pytest.raises(UserError, match="has no member 'nosuch'"):
        compile_btf(parse_spec(["vfs_read", "file->nosuch"]), "g", btf_path=BTF)
    with pytest.raises(UserError, match="not a pointer"):
        compile_btf(parse_spec(["vfs_read", "count->x"]), "g", btf_path=BTF)


def test_guard_excludes_our_pid_by_default_and_sshd_on_the_output_path():
    spec = parse_spec(["tcp_sendmsg"])
    local = guard.advise(spec, environ={})
    assert local.filter.startswith("common_pid != ") and not local.needs_confirmation
    over_ssh = guard.advise(spec, environ={"SSH_CONNECTION": "10.0.0.9 51234 10.0.0.1 22"})
    assert over_ssh.needs_confirmation and "10.0.0.9:51234" in over_ssh.warnings[0]
    assert guard.advise(parse_spec(["do_sys_openat2"]), environ={"SSH_CONNECTION": "a b c d"}).warnings == []
    assert guard.advise(spec, exclude_pids=[], environ={}).filter is None


def test_combine_filters():
    assert guard.combine_filters("len > 10", None, "common_pid != 5") == "(len > 10) && (common_pid != 5)"
    assert guard.combine_filters(None, "x") == "x"
    assert guard.combine_filters() is None


@needs_btf
def test_btf_types_retval_from_the_return_type():
    from kprobe_tui.probes.compile import compile_spec

    [probe] = compile_spec(parse_spec(["vfs_read%return", "$retval"]), "g", btf_path=BTF)
    assert probe.definition() == "r:g/vfs_read__return vfs_read+0 retval=$retval:s64"
    [fprobe] = compile_spec(parse_spec(["vfs_read%return", "$retval"], fprobe=True), "g", btf_path=BTF)
    assert fprobe.definition() == "f:g/vfs_read__return vfs_read%return retval=$retval:s64"


def test_kernel_path_reads_globals_by_symbol_from_dwarf(tmp_path):
    """Kprobes go through the same DWARF compiler; globals become @symbol (KASLR moves addresses)."""
    import subprocess

    from kprobe_tui.probes.compile import compile_spec

    source = Path(__file__).parents[1] / "live" / "c" / "capture.c"
    image = tmp_path / "vmlinux-like"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(image), str(source)], check=True)
    [probe] = compile_spec(parse_spec(["inspect", "total_calls", "rec->kind", "label:string"]), "g", vmlinux=str(image))
    assert probe.definition() == (
        "p:g/inspect inspect+0 total_calls=@total_calls:s64 kind=+64(%di):b3@1/32 label=+0(%dx):string"
    )
    assert probe.control_file == "kprobe_events"
