"""The BTF reader on this machine's kernel BTF, against what the kernel declares, pahole, bpftool and gcc."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from kprobe_tui.kernel.btf import KIND_NAMES, Btf

BTF_DIR = Path("/sys/kernel/btf")
VMLINUX = BTF_DIR / "vmlinux"

pytestmark = pytest.mark.skipif(not VMLINUX.exists(), reason="this kernel has no /sys/kernel/btf/vmlinux")


def _tool(name: str):
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"needs {name} as the oracle")


def _run(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def vmlinux() -> Btf:
    return Btf.load(VMLINUX)


@pytest.mark.parametrize(
    "name, declared",
    [
        ("vfs_read", "ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)"),
        ("do_sys_openat2", "int do_sys_openat2(int dfd, const char *filename, struct open_how *how)"),
        ("tcp_sendmsg", "int tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size)"),
        ("_printk", "int _printk(const char *fmt, ...)"),
        ("schedule", "void schedule(void)"),
    ],
)
def test_prototype_as_the_kernel_declares_it(vmlinux, name, declared):
    assert vmlinux.prototype(name) == declared


def test_struct_sock_state_through_anonymous_and_embedded_members(vmlinux):
    sk = vmlinux.pointee(vmlinux.params("tcp_sendmsg")[0].type_id)
    assert vmlinux.type_name(sk) == "struct sock"
    path = vmlinux.find_member(sk, "__sk_common.skc_state")
    assert [step.member.name for step in path] == ["__sk_common", "skc_state"]
    assert vmlinux.type_name(path[-1].member.type_id) == "volatile unsigned char"
    assert vmlinux.size_of(path[-1].member.type_id) == 1
    skb = vmlinux.find_type("struct sk_buff")
    assert vmlinux.type_name(vmlinux.find_member(skb, "len")[-1].member.type_id) == "unsigned int"


def test_kernel_layouts_that_do_not_change(vmlinux):
    """Facts of the kernel's own headers (uapi or unchanged for years), checked without any tool."""
    fops = vmlinux.find_type("struct file_operations")
    read = vmlinux.find_member(fops, "read")[-1].member
    assert vmlinux.declare(read.type_id, read.name) == "ssize_t (*read)(struct file *, char *, size_t, loff_t *)"
    comm = vmlinux.find_member(vmlinux.find_type("struct task_struct"), "comm")[-1].member
    assert (vmlinux.declare(comm.type_id, "comm"), vmlinux.size_of(comm.type_id)) == ("char comm[16]", 16)
    prog_types = dict(vmlinux.enumerators(vmlinux.find_type("enum bpf_prog_type")))
    assert (prog_types["BPF_PROG_TYPE_UNSPEC"], prog_types["BPF_PROG_TYPE_KPROBE"]) == (0, 2)
    common = vmlinux.find_type("struct sock_common")
    daddr, saddr = vmlinux.find_member(common, "skc_daddr"), vmlinux.find_member(common, "skc_rcv_saddr")
    assert [step.member.name for step in daddr] == ["", "", "skc_daddr"]
    assert (daddr[-1].byte_offset, saddr[-1].byte_offset) == (0, 4)
    reuse, reuseport = vmlinux.find_member(common, "skc_reuse")[-1], vmlinux.find_member(common, "skc_reuseport")[-1]
    assert (reuse.bitfield_size, reuseport.bitfield_size) == (4, 1)
    assert reuseport.bit_offset == reuse.bit_offset + 4


# --- pahole: member offsets ------------------------------------------------------------------

_PAHOLE_MEMBER = re.compile(r"^\s*(?P<decl>[^/]*?);\s*/\*\s*(?P<byte>\d+)(?::\s*(?P<bit>\d+))?\s+\d+\s*\*/")


def _pahole_offsets(text: str) -> list[tuple[str, int, int]]:
    """(member path, absolute bit offset, bitfield size) for every named member pahole prints."""
    stack: list[list[tuple[str, int, int]]] = [[]]
    for line in text.splitlines()[1:]:
        if line.rstrip().endswith("{"):
            stack.append([])
            continue
        match = _PAHOLE_MEMBER.match(line)
        if match is None:
            continue
        decl = re.sub(r"\s*__attribute__\(\(.*\)\)", "", match["decl"]).strip()
        bits = int(match["byte"]) * 8 + int(match["bit"] or 0)
        if decl.startswith("}"):
            inner, outer = stack.pop(), stack[-1]
            name = decl[1:].strip()
            outer.extend((f"{name}.{path}" if name else path, off, size) for path, off, size in inner)
            if name:
                outer.append((name, bits, 0))
            continue
        pointer_name = re.search(r"\(\*\s*(\w+)\)", decl)
        plain = re.search(r"(\w+)\s*(?:\[[^\]]*\])*\s*(?::\s*(\d+))?$", decl)
        name = pointer_name[1] if pointer_name else plain[1]
        stack[-1].append((name, bits, int(plain[2]) if plain and plain[2] and not pointer_name else 0))
    return stack[0]


@_tool("pahole")
@pytest.mark.parametrize("struct_name", ["sock_common", "sock", "sk_buff", "file", "task_struct", "inode"])
def test_member_offsets_match_pahole(vmlinux, struct_name):
    text = _run("pahole", "-C", struct_name, VMLINUX)
    expected = _pahole_offsets(text)
    assert len(expected) > 10
    struct_id = vmlinux.find_type(f"struct {struct_name}")
    for path, bit_offset, bitfield_size in expected:
        last = vmlinux.find_member(struct_id, path)[-1]
        assert (path, last.bit_offset, last.bitfield_size) == (path, bit_offset, bitfield_size)


@_tool("pahole")
def test_skc_state_offset_matches_pahole(vmlinux):
    offsets = {path: bits for path, bits, _ in _pahole_offsets(_run("pahole", "-C", "sock_common", VMLINUX))}
    sk = vmlinux.find_type("struct sock")
    step = vmlinux.find_member(sk, "__sk_common.skc_state")[-1]
    assert step.byte_offset * 8 == step.bit_offset == offsets["skc_state"]


# --- bpftool: the whole index ----------------------------------------------------------------


@pytest.fixture(scope="module")
def bpftool_raw() -> str:
    if shutil.which("bpftool") is None:
        pytest.skip("needs bpftool as the oracle")
    return _run("bpftool", "btf", "dump", "file", VMLINUX)


def test_every_type_kind_matches_bpftool(vmlinux, bpftool_raw):
    theirs = Counter(re.findall(r"^\[\d+\] (\w+) ", bpftool_raw, re.M))
    ours = Counter(KIND_NAMES[vmlinux.kind(t)] for t in vmlinux.type_ids())
    assert ours == theirs


def test_every_function_parameter_matches_bpftool(vmlinux, bpftool_raw):
    """Each FUNC's parameter names and type ids equal bpftool's dump of its FUNC_PROTO."""
    protos: dict[str, list[tuple[str, int]]] = {}
    for block in re.finditer(r"^\[(\d+)\] FUNC_PROTO .*\n((?:\t.*\n)*)", bpftool_raw, re.M):
        args = re.findall(r"^\t'([^']*)' type_id=(\d+)", block[2], re.M)
        protos[block[1]] = [("" if n == "(anon)" else n, int(t)) for n, t in args]
    functions = dict(re.findall(r"^\[\d+\] FUNC '(\w+)' type_id=(\d+)", bpftool_raw, re.M))
    assert set(vmlinux.function_names()) == set(functions)
    for name, proto in functions.items():
        ours = [(p.name if p.name != "..." else "", p.type_id) for p in vmlinux.params(name)]
        assert ours == protos[proto], name


# --- gcc: every prototype is valid C ---------------------------------------------------------


@_tool("gcc")
@_tool("bpftool")
def test_every_prototype_compiles_against_bpftools_header(vmlinux, tmp_path):
    """All ~56k rendered prototypes, declared after bpftool's vmlinux.h, are accepted by gcc."""
    header = _run("bpftool", "btf", "dump", "file", VMLINUX, "format", "c")
    prototypes = "\n".join(f"{vmlinux.prototype(name)};" for name in sorted(vmlinux.function_names()))
    source = tmp_path / "prototypes.c"
    source.write_text(f"#define BPF_NO_PRESERVE_ACCESS_INDEX\n{header}\n{prototypes}\n")
    result = subprocess.run(
        ["gcc", "-fsyntax-only", "-ffreestanding", "-fno-builtin", "-w", str(source)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[:2000]


# --- split BTF -------------------------------------------------------------------------------


@_tool("pahole")
@_tool("gcc")
def test_split_btf_on_the_live_base(vmlinux, tmp_path):
    """pahole --btf_base builds BTF as the kernel does for a module; its types use vmlinux's."""
    (tmp_path / "mod.c").write_text(
        "struct file; struct mymod_state { struct file *f; unsigned long flags; int refs; };\n"
        "long mymod_ioctl(struct mymod_state *s, unsigned int cmd, unsigned long arg) { return s->refs + cmd; }\n"
    )
    _run("gcc", "-g", "-c", tmp_path / "mod.c", "-o", tmp_path / "mod.o")
    _run("pahole", "--btf_base", VMLINUX, f"--btf_encode_detached={tmp_path / 'mod.btf'}", tmp_path / "mod.o")
    module = Btf.load(tmp_path / "mod.btf", base=vmlinux)
    assert module.type_ids().start == vmlinux.type_ids().stop
    assert module.prototype("mymod_ioctl") == (
        "long int mymod_ioctl(struct mymod_state *s, unsigned int cmd, long unsigned int arg)"
    )
    file_pointer = module.params("mymod_ioctl")[0].type_id
    state = module.pointee(file_pointer)
    (f,) = module.find_member(state, "f")
    assert module.pointee(f.member.type_id) == vmlinux.find_type("struct file")
    assert module.find_member(state, "refs")[-1].byte_offset == 16


def test_loaded_modules_btf(vmlinux):
    modules = sorted(p for p in BTF_DIR.iterdir() if p.name != "vmlinux")[:5]
    if not modules:
        pytest.skip("no module with BTF is loaded")
    for path in modules:
        module = Btf.load(path, base=vmlinux)
        assert module.type_ids().start == vmlinux.type_ids().stop
        for name in module.function_names():
            assert f"{name}(" in module.prototype(name)
