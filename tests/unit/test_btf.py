"""The BTF reader on real BTF: gcc compiles C in the test, pahole encodes it, gcc itself is the layout oracle.

Error tests cut or patch those real blobs (or the live vmlinux blob when pahole is missing).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from array import array
from pathlib import Path

import pytest

from kprobe_tui.kernel.btf import ENUM64, FUNC, FWD, STRUCT, UNION, Btf, BtfError, Param

VMLINUX = Path("/sys/kernel/btf/vmlinux")

HAS_TOOLS = shutil.which("pahole") is not None and shutil.which("gcc") is not None
needs_pahole = pytest.mark.skipif(not HAS_TOOLS, reason="needs gcc and pahole (apt-get install pahole)")

SOURCE = r"""
typedef unsigned long size_t;
typedef int row_t[3];
struct opaque;
union value { long l; double d; };
enum color { RED = -1, GREEN = 5, BLUE = 7 };
enum big { SMALL = 1, HUGE = 0x123456789aULL };
struct flags {
	unsigned int a:3;
	unsigned int b:5;
	int c;
	union {
		long u1;
		struct { short s1; short s2; };
	};
	void (*cb)(int, char *);
	char name[16];
	row_t grid[2];
	int (*matrix)[4];
	const char *const label;
	volatile unsigned char state;
	struct opaque *handle;
	union value v;
	enum color color;
	enum big big;
	_Bool on;
	unsigned long long wide:40;
	char tail[];
};
typedef void (*handler_t)(int);
int use_flags(struct flags *f, enum color c, const char *fmt, ...) { return f->a + c; }
void no_args(void) {}
handler_t pick_handler(int sig, handler_t fallback) { return fallback; }
void (*signal_like(int sig, void (*fn)(int)))(int) { return fn; }
size_t copy_rows(row_t *dst, const int (*src)[3], size_t n) { return n; }
"""

# Prints what gcc laid out: offsetof/sizeof, and each bitfield's first bit and width found by setting it.
LAYOUT_PROGRAM = r"""
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#define OFF(m) printf(#m " %zu\n", offsetof(struct flags, m) * 8)
#define BITS(m) do { struct flags f; unsigned char *p = (unsigned char *)&f; int first = -1, width = 0; \
	memset(&f, 0, sizeof f); f.m = ~0ULL; \
	for (int i = 0; i < (int)(sizeof f * 8); i++) if (p[i / 8] >> (i % 8) & 1) { if (first < 0) first = i; width++; } \
	printf(#m " %d %d\n", first, width); } while (0)
int main(void) {
	printf("sizeof %zu\n", sizeof(struct flags));
	OFF(c); OFF(u1); OFF(s1); OFF(s2); OFF(cb); OFF(name); OFF(grid); OFF(matrix); OFF(label); OFF(state);
	OFF(handle); OFF(v); OFF(color); OFF(big); OFF(on); OFF(tail);
	BITS(a); BITS(b); BITS(wide);
	return 0;
}
"""

MODULE_SOURCE = r"""
struct flags;
struct mod_state { struct flags *flags; unsigned long refs; int users; };
long mod_ioctl(struct mod_state *s, unsigned int cmd, unsigned long arg) { return s->users + cmd; }
"""


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True, cwd=cwd).stdout


def _encode(tmp: Path, name: str, source: str, base: Path | None = None) -> Path:
    """gcc -g -c, then pahole adds .BTF to the object, then objcopy extracts the raw blob."""
    (tmp / f"{name}.c").write_text(source)
    obj = tmp / f"{name}.o"
    _run("gcc", "-g", "-O0", "-c", tmp / f"{name}.c", "-o", obj)
    if base is None:
        _run("pahole", "-J", obj)
        _run("objcopy", f"--dump-section=.BTF={tmp / (name + '.btf')}", obj)
    else:  # split BTF, as the kernel builds it for modules
        _run("pahole", "--btf_base", base, f"--btf_encode_detached={tmp / (name + '.btf')}", obj)
    return tmp / f"{name}.btf"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    if not HAS_TOOLS:
        pytest.skip("needs gcc and pahole (apt-get install pahole)")
    tmp = tmp_path_factory.mktemp("btf")
    _encode(tmp, "prog", SOURCE)
    return tmp


@pytest.fixture(scope="module")
def btf(built) -> Btf:
    return Btf.load(built / "prog.btf")


@pytest.fixture(scope="module")
def gcc_layout(built) -> dict[str, tuple[int, ...]]:
    (built / "layout.c").write_text(SOURCE.split("typedef void (*handler_t)")[0] + LAYOUT_PROGRAM)
    _run("gcc", "-O0", built / "layout.c", "-o", built / "layout")
    return {line.split()[0]: tuple(map(int, line.split()[1:])) for line in _run(built / "layout").splitlines()}


def _real_blob(built_dir: Path | None) -> bytes:
    if built_dir is not None:
        return (built_dir / "prog.btf").read_bytes()
    if VMLINUX.exists():
        return VMLINUX.read_bytes()
    pytest.skip("needs pahole or /sys/kernel/btf/vmlinux for a real blob")


@pytest.fixture
def real_blob(request) -> bytes:
    return _real_blob(request.getfixturevalue("built") if HAS_TOOLS else None)


# --- prototypes ------------------------------------------------------------------------------


@needs_pahole
@pytest.mark.parametrize(
    "name, expected",
    [
        ("use_flags", "int use_flags(struct flags *f, enum color c, const char *fmt, ...)"),
        ("no_args", "void no_args(void)"),
        ("pick_handler", "handler_t pick_handler(int sig, handler_t fallback)"),
        ("signal_like", "void (*signal_like(int sig, void (*fn)(int)))(int)"),
        ("copy_rows", "size_t copy_rows(row_t *dst, const int (*src)[3], size_t n)"),
    ],
)
def test_prototype_is_the_c_declaration(btf, name, expected):
    assert btf.prototype(name) == expected


@needs_pahole
def test_function_index(btf):
    assert set(btf.function_names()) == {"use_flags", "no_args", "pick_handler", "signal_like", "copy_rows"}
    assert btf.has_function("no_args") and not btf.has_function("flags")
    assert btf.prototype("missing") is None


@needs_pahole
def test_params_and_return_type(btf):
    params = btf.params("use_flags")
    assert [p.name for p in params] == ["f", "c", "fmt", "..."]
    assert [p.c_type for p in params] == ["struct flags *", "enum color", "const char *", "..."]
    assert params[-1] == Param("...", 0, "...")
    assert btf.params("no_args") == []
    assert btf.return_type("no_args") == 0
    assert btf.type_name(btf.return_type("copy_rows")) == "size_t"
    assert btf.type_name(btf.resolve(btf.return_type("copy_rows"))) == "long unsigned int"
    assert btf.type_name(btf.return_type("signal_like")) == "void (*)(int)"


# --- types and members -----------------------------------------------------------------------


def _member(btf: Btf, struct_id: int, name: str):
    return next(m for m in btf.members(struct_id) if m.name == name)


@needs_pahole
def test_member_offsets_match_gcc(btf, gcc_layout):
    flags = btf.find_type("struct flags")
    assert btf.size_of(flags) == gcc_layout["sizeof"][0]
    for name in ("c", "u1", "s1", "s2", "cb", "name", "grid", "matrix", "label", "state", "handle", "v", "color", "big",
                 "on", "tail"):
        (step,) = [s for s in btf.find_member(flags, name) if s.member.name == name]
        assert (name, step.bit_offset, step.byte_offset) == (name, gcc_layout[name][0], gcc_layout[name][0] // 8)
        assert step.bitfield_size == 0


@needs_pahole
@pytest.mark.parametrize("name", ["a", "b", "wide"])
def test_bitfields_match_gcc(btf, gcc_layout, name):
    first_bit, width = gcc_layout[name]
    (step,) = btf.find_member(btf.find_type("struct flags"), name)
    assert (step.bit_offset, step.bitfield_size, step.byte_offset) == (first_bit, width, first_bit // 8)


@needs_pahole
def test_find_member_descends_through_anonymous_members(btf):
    flags = btf.find_type("struct flags")
    path = btf.find_member(flags, "s2")
    assert [step.member.name for step in path] == ["", "", "s2"]
    assert [btf.kind(btf.resolve(step.member.type_id)) for step in path[:2]] == [UNION, STRUCT]
    assert path[-1].byte_offset == 10
    assert [s.member.name for s in btf.find_member(flags, "v.d")] == ["v", "d"]
    assert btf.find_member(flags, "v.d")[-1].byte_offset == btf.find_member(flags, "v")[0].byte_offset


@needs_pahole
def test_members_list_anonymous_members(btf):
    members = btf.members(btf.find_type("struct flags"))
    assert [m.name for m in members][:5] == ["a", "b", "c", "", "cb"]
    anonymous = members[3]
    assert anonymous.bit_offset == 64 and btf.kind(anonymous.type_id) == UNION


@needs_pahole
@pytest.mark.parametrize(
    "member, spelling, size",
    [
        ("cb", "void (*)(int, char *)", 8),
        ("name", "char[16]", 16),
        ("grid", "int[6]", 24),  # pahole flattens multi-dimensional arrays
        ("matrix", "int (*)[4]", 8),
        ("label", "const char *const", 8),
        ("state", "volatile unsigned char", 1),
        ("handle", "struct opaque *", 8),
        ("v", "union value", 8),
        ("color", "enum color", 4),
        ("big", "enum big", 8),
        ("on", "_Bool", 1),
        ("tail", "char[]", 0),
    ],
)
def test_type_spelling_and_size(btf, member, spelling, size):
    type_id = _member(btf, btf.find_type("struct flags"), member).type_id
    assert btf.type_name(type_id) == spelling
    assert btf.size_of(type_id) == size


@needs_pahole
def test_pointers_signedness_and_forward_declarations(btf):
    flags = btf.find_type("struct flags")
    handle = _member(btf, flags, "handle").type_id
    assert btf.is_pointer(handle) and not btf.is_pointer(flags)
    assert btf.kind(btf.pointee(handle)) == FWD
    assert btf.is_pointer(_member(btf, flags, "cb").type_id)
    assert btf.is_signed(btf.find_type("enum color")) and not btf.is_signed(btf.find_type("enum big"))
    assert btf.is_signed(_member(btf, flags, "c").type_id) and not btf.is_signed(_member(btf, flags, "state").type_id)
    assert btf.find_type("struct nope") is None


@needs_pahole
def test_enumerators(btf):
    assert btf.enumerators(btf.find_type("enum color")) == [("RED", -1), ("GREEN", 5), ("BLUE", 7)]
    big = btf.find_type("enum big")
    assert btf.kind(big) == ENUM64
    assert btf.enumerators(big) == [("SMALL", 1), ("HUGE", 0x123456789A)]


@needs_pahole
@pytest.mark.skipif(shutil.which("bpftool") is None, reason="needs bpftool as the oracle")
def test_member_declarations_match_bpftool(built, btf):
    """Every named member declaration equals the line bpftool's C dump prints for it."""
    dumped = _run("bpftool", "btf", "dump", "file", built / "prog.btf", "format", "c")
    start = dumped.index("struct flags {")
    body = dumped[start : dumped.index("\n};", start)]
    lines = [line.strip() for line in body.splitlines()[1:]]
    expected = {_normalise(line) for line in lines if line.endswith(";") and not line.startswith("}")}

    def declarations(struct_id):
        for m in btf.members(struct_id):
            if m.name:
                bits = f": {m.bitfield_size}" if m.bitfield_size else ""
                yield _normalise(f"{btf.declare(m.type_id, m.name)}{bits};")
            else:
                yield from declarations(m.type_id)

    ours = set(declarations(btf.find_type("struct flags")))
    assert ours == expected


def _normalise(declaration: str) -> str:
    """bpftool writes "* const" and [0] for flexible arrays; the kernel writes "*const" and []."""
    return declaration.strip().replace(" * const", " *const").replace("[0];", "[];")


# --- split BTF, byte order, ELF input --------------------------------------------------------


@needs_pahole
def test_split_btf_continues_the_base(built, btf):
    module = Btf.load(_encode(built, "module", MODULE_SOURCE, base=built / "prog.btf"), base=btf)
    assert module.type_ids().start == btf.type_ids().stop
    assert list(module.function_names()) == ["mod_ioctl"]
    assert not module.has_function("use_flags")
    assert module.prototype("mod_ioctl") == (
        "long int mod_ioctl(struct mod_state *s, unsigned int cmd, long unsigned int arg)"
    )
    state = module.find_type("struct mod_state")
    assert state in module.type_ids()
    (flags_step,) = module.find_member(state, "flags")
    assert module.type_name(flags_step.member.type_id) == "struct flags *"
    assert module.find_type("struct flags") == btf.find_type("struct flags")  # a base type, found through the base
    assert module.find_member(state, "users")[0].byte_offset == 16


@needs_pahole
def test_split_btf_without_its_base_is_refused(built):
    split = _encode(built, "module2", MODULE_SOURCE, base=built / "prog.btf")
    with pytest.raises(BtfError, match="string offset .* past the string section") as caught:
        Btf.load(split)
    assert "base=" in caught.value.hint and str(split) in caught.value.message


def _big_endian(blob: bytes) -> bytes:
    """The same BTF in big-endian order: the header's fields and every 32-bit word of the type section swap."""
    hdr_len, type_off, type_len = struct.unpack_from("<III", blob, 4)
    header = struct.pack(">HBB", *struct.unpack_from("<HBB", blob)) + struct.pack(
        ">IIIII", *struct.unpack_from("<IIIII", blob, 4)
    )
    words = array("I", blob[hdr_len + type_off : hdr_len + type_off + type_len])
    words.byteswap()
    start, end = hdr_len + type_off, hdr_len + type_off + type_len
    return header + blob[24:start] + words.tobytes() + blob[end:]


@needs_pahole
def test_big_endian_blob_reads_the_same(built, btf, tmp_path):
    swapped = tmp_path / "be.btf"
    swapped.write_bytes(_big_endian((built / "prog.btf").read_bytes()))
    other = Btf.load(swapped)
    assert swapped.read_bytes()[:2] == b"\xeb\x9f"
    for name in btf.function_names():
        assert other.prototype(name) == btf.prototype(name)
    flags = btf.find_type("struct flags")
    assert other.members(flags) == btf.members(flags)
    assert other.enumerators(btf.find_type("enum color")) == [("RED", -1), ("GREEN", 5), ("BLUE", 7)]


@needs_pahole
def test_elf_object_with_btf_section_loads(built, btf):
    from_elf = Btf.load(built / "prog.o")
    assert from_elf.prototype("use_flags") == btf.prototype("use_flags")


# --- errors ----------------------------------------------------------------------------------


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "patched.btf"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("keep", [10, 23])
def test_shorter_than_the_header(tmp_path, real_blob, keep):
    path = _write(tmp_path, real_blob[:keep])
    with pytest.raises(BtfError, match=rf"{keep} bytes is shorter than the 24-byte BTF header") as caught:
        Btf.load(path)
    assert str(path) in caught.value.message and "truncated" in caught.value.hint


def test_truncated_blob(tmp_path, real_blob):
    with pytest.raises(BtfError, match="section .* runs past the end of the file") as caught:
        Btf.load(_write(tmp_path, real_blob[: len(real_blob) // 2]))
    assert "truncated" in caught.value.hint


def test_bad_magic(tmp_path, real_blob):
    with pytest.raises(BtfError, match="not BTF: magic is 0x7a7a, expected 0xeb9f"):
        Btf.load(_write(tmp_path, b"zz" + real_blob[2:]))


def test_unknown_version(tmp_path, real_blob):
    with pytest.raises(BtfError, match="unknown BTF version 2"):
        Btf.load(_write(tmp_path, real_blob[:2] + b"\x02" + real_blob[3:]))


def test_missing_file(tmp_path):
    with pytest.raises(BtfError, match="no such BTF file") as caught:
        Btf.load(tmp_path / "nothing")
    assert "CONFIG_DEBUG_INFO_BTF" in caught.value.hint


@needs_pahole
def test_elf_without_btf(built):
    plain = built / "plain.o"
    _run("gcc", "-c", built / "prog.c", "-o", plain)
    with pytest.raises(BtfError, match="has no .BTF section"):
        Btf.load(plain)


@needs_pahole
def test_truncated_elf(built, tmp_path):
    cut = _write(tmp_path, (built / "prog.o").read_bytes()[:700])
    with pytest.raises(BtfError, match="not a readable ELF file"):
        Btf.load(cut)


def _patch_type(built: Path, btf: Btf, type_id: int, word: int, value: int) -> bytes:
    """The blob with 32-bit word ``word`` (0 name, 1 info, 2 size/type) of type ``type_id`` replaced."""
    data = bytearray((built / "prog.btf").read_bytes())
    struct.pack_into("<I", data, btf._offsets[type_id - 1] + 4 * word, value)
    return bytes(data)


@needs_pahole
def test_type_id_out_of_range(built, btf, tmp_path):
    fmt = btf.params("use_flags")[2].type_id  # const char *
    broken = Btf.load(_write(tmp_path, _patch_type(built, btf, fmt, 2, 99999)))
    with pytest.raises(BtfError, match=r"type id 99999 is out of range \(the last type is \d+\)"):
        broken.prototype("use_flags")


@needs_pahole
def test_string_offset_out_of_range(built, btf, tmp_path):
    func = next(t for t in btf.type_ids() if btf.kind(t) == FUNC and btf.name(t) == "no_args")
    with pytest.raises(BtfError, match="string offset 16777215 is past the string section"):
        Btf.load(_write(tmp_path, _patch_type(built, btf, func, 0, 0xFFFFFF)))


@needs_pahole
def test_unknown_kind(built, btf, tmp_path):
    with pytest.raises(BtfError, match="type 1 has unknown kind 25"):
        Btf.load(_write(tmp_path, _patch_type(built, btf, 1, 1, 25 << 24)))


@needs_pahole
def test_cyclic_types_are_reported_not_recursed(built, btf, tmp_path):
    pointer = btf.params("use_flags")[0].type_id  # struct flags *
    broken = Btf.load(_write(tmp_path, _patch_type(built, btf, pointer, 2, pointer)))
    with pytest.raises(BtfError, match="does not end"):
        broken.prototype("use_flags")
    handler_t = btf.find_type("handler_t")
    broken = Btf.load(_write(tmp_path, _patch_type(built, btf, handler_t, 2, handler_t)))
    with pytest.raises(BtfError, match="does not end"):
        broken.resolve(handler_t)


@needs_pahole
def test_unknown_function_suggests_close_names(btf):
    with pytest.raises(BtfError, match="no function 'use_flag'") as caught:
        btf.params("use_flag")
    assert "use_flags" in caught.value.hint


@needs_pahole
def test_member_errors_name_the_member(btf):
    flags = btf.find_type("struct flags")
    with pytest.raises(BtfError, match="struct flags has no member 'nmae'") as caught:
        btf.find_member(flags, "nmae")
    assert "name" in caught.value.hint
    with pytest.raises(BtfError, match="'handle' is a pointer") as caught:
        btf.find_member(flags, "handle.x")
    assert caught.value.hint == "dereference it: handle->x"
    with pytest.raises(BtfError, match="empty member name"):
        btf.find_member(flags, "v..d")
    with pytest.raises(BtfError, match="'int' is not a struct or union"):
        btf.find_member(flags, "c.x")
    with pytest.raises(BtfError, match="has no size"):
        btf.size_of(btf.pointee(_member(btf, flags, "cb").type_id))
