"""Location expressions -> fetch-args, the BTF compiler on this machine's BTF, and the feedback guard."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.kernel.btf import Btf
from kprobe_tui.probes import guard
from kprobe_tui.probes.btffetch import compile_btf
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


# -- arguments on return probes ----------------------------------------------------------------

SNAPSHOTS = Path(__file__).parents[1] / "fixtures" / "snapshots"


@functools.lru_cache(maxsize=2)
def _snapshot(name: str) -> tuple[str, str, Path]:
    """A captured kernel: its tracefs README (6.12 saves entry arguments for return probes, 6.1 does not) and BTF."""
    from kprobe_tui.kernel.snapshot import open_snapshot

    sources = open_snapshot(SNAPSHOTS / f"{name}.tar.gz")
    readme = (sources.tracefs / "README").read_text()
    assert ("return probes support: $retval, $arg<N>" in readme) == (name == "debian-6.12")
    return name, readme, sources.btf_vmlinux


@pytest.fixture(params=["debian-6.1", "debian-6.12"])
def kernel(request):
    return _snapshot(request.param)


def _compile(words, kernel, **kwargs):
    from kprobe_tui.probes.compile import compile_spec

    _, readme, btf = kernel
    return compile_spec(parse_spec(words), "g", readme=readme, btf_path=btf, **kwargs)


@pytest.mark.parametrize(
    "words, on_612",
    [
        # 6.12 resolves BTF names and -> chains itself, at exit too
        (["do_sys_openat2%return", "fname=filename:ustring", "$retval"],
         "r:g/do_sys_openat2__return do_sys_openat2+0 fname=filename:ustring retval=$retval:s64"),
        (["do_sys_openat2%return", "$params"], "r:g/do_sys_openat2__return do_sys_openat2+0 dfd=dfd filename=filename how=how"),
        (["vfs_read%return", "$arg2"], "r:g/vfs_read__return vfs_read+0 arg2=$arg2"),
    ],
)
def test_parameters_at_exit_read_what_the_kernel_saved_at_entry(kernel, words, on_612):
    name, _, _ = kernel
    if name == "debian-6.12":
        [probe] = _compile(words, kernel)
        assert probe.definition() == on_612
        return
    with pytest.raises(UserError) as refused:
        _compile(words, kernel)
    token = next(word for word in words[1:] if word != "$retval")
    assert refused.value.message.startswith(f"{token!r}: this kernel cannot read arguments at function exit")
    assert refused.value.hint == f"probe the entry too: kprobe-tui probe '{words[0].removesuffix('%return')}' '{token}'"


def test_members_at_exit_are_offsets_from_the_saved_argument_never_the_entry_register():
    """A '.' step is compiled from BTF (the kernel resolves only -> chains): based on $arg1, not %di."""
    kernel = _snapshot("debian-6.12")
    btf = Btf.load(kernel[2])
    [*_, dentry] = btf.find_member(btf.find_type("struct file"), "f_path.dentry")
    [probe] = _compile(["vfs_read%return", "file->f_path.dentry", "count"], kernel)
    assert probe.definition() == f"r:g/vfs_read__return vfs_read+0 dentry=+{dentry.byte_offset}($arg1):x64 count=count"
    [entry] = _compile(["vfs_read", "file->f_path.dentry"], kernel)
    assert entry.args[0].fetch == f"+{dentry.byte_offset}(%di)"


def test_dwarf_parameters_at_exit_are_numbered_arguments_and_locals_are_refused(kernel, tmp_path):
    """The DWARF path (-k VMLINUX): parameter N is $argN, members offsets from it; globals read as at entry."""
    import subprocess

    name, _, _ = kernel
    image = tmp_path / "vmlinux-like"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(image), str(Path(__file__).parents[1] / "live" / "c" / "capture.c")], check=True)
    words = ["inspect%return", "rec->kind", "label:string", "total_calls", "$retval"]
    with pytest.raises(UserError, match="'sum': local variables are gone when the function returns"):
        _compile(["accumulate%return", "sum"], kernel, vmlinux=str(image))
    [globals_only] = _compile(["inspect%return", "total_calls", "$retval"], kernel, vmlinux=str(image))
    assert globals_only.definition() == "r:g/inspect__return inspect+0 total_calls=@total_calls:s64 retval=$retval:s32"
    if name == "debian-6.1":
        with pytest.raises(UserError, match="'rec->kind': this kernel cannot read arguments at function exit"):
            _compile(words, kernel, vmlinux=str(image))
        return
    [probe] = _compile(words, kernel, vmlinux=str(image))
    assert probe.definition() == (
        "r:g/inspect__return inspect+0 kind=+64($arg1):b3@1/32 label=+0($arg3):string total_calls=@total_calls:s64"
        " retval=$retval:s32"
    )
    [params] = _compile(["inspect%return", "$params"], kernel, vmlinux=str(image))
    assert [a.render() for a in params.args] == ["rec=$arg1:x64", "scale=$arg2:s32", "label=$arg3:x64"]


def test_uprobes_refuse_parameters_at_exit_instead_of_reading_clobbered_registers(tmp_path):
    """uprobes have no saved entry arguments (the kernel refuses $argN there): %di at exit would be garbage."""
    import subprocess

    from kprobe_tui.probes.compile import compile_spec

    readme = "kernel return probes support: $retval, $arg<N>, $comm"  # about kernel probes only
    binary = tmp_path / "capture"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(binary), str(Path(__file__).parents[1] / "live" / "c" / "capture.c")], check=True)
    for token in ("rec->id", "$params", "$arg2"):
        with pytest.raises(UserError) as refused:
            compile_spec(parse_spec(["inspect%return", token], binary=str(binary)), "g", readme=readme)
        assert refused.value.message.startswith(f"{token!r}: uprobes cannot read arguments at function exit")
        assert refused.value.hint == f"probe the entry too: kprobe-tui probe -x {binary} 'inspect' '{token}'"
