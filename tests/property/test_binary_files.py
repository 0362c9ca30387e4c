"""Files from elsewhere: ELF headers, BTF, compressed sections, snapshot archives, the config file, export's CONFIG.

Each starts from a real file made here (gcc, pahole, the running kernel's BTF, an archive written
with tarfile) and is mutated where its headers are: any bytes give a result or a UserError (ELF:
its documented NotElf).
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import tarfile
import zlib
from contextlib import suppress
from pathlib import Path

import pytest
import zstandard
from hypothesis import example, given
from hypothesis import strategies as st

from kprobe_tui import config
from kprobe_tui.aggregate import exportconfig
from kprobe_tui.debuginfo.sections import inflate
from kprobe_tui.elf import ElfFile, NotElf
from kprobe_tui.errors import UserError
from kprobe_tui.kernel import btf as btfmod
from kprobe_tui.kernel.snapshot import open_snapshot
from tests.property.mutation import examples, mutated_bytes, mutated_text
from tests.unit.test_exportconfig import GOOD as GOOD_EXPORT_CONFIG

C_SOURCE = """
struct node { struct node *next; unsigned flags : 3; int value; char name[16]; };
enum colour { RED, GREEN = 7 };
union either { long l; double d; };
int counter;
int walk(struct node *n, enum colour c, union either *e, ...) { return n->value + c + (int)e->l + counter; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, bytes]:
    """An object file, the same with compressed debug sections, and its BTF (pahole -J)."""
    out = tmp_path_factory.mktemp("elf")
    (out / "t.c").write_text(C_SOURCE)
    subprocess.run(["gcc", "-O1", "-g", "-c", "-o", str(out / "t.o"), str(out / "t.c")], check=True)
    subprocess.run(["gcc", "-O1", "-g", "-gz=zlib", "-c", "-o", str(out / "tz.o"), str(out / "t.c")], check=True)
    subprocess.run(["pahole", "-J", str(out / "t.o")], check=True, capture_output=True)
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.BTF", str(out / "t.o"), str(out / "t.btf")], check=True)
    return {name: (out / name).read_bytes() for name in ("t.o", "tz.o", "t.btf")}


# --- ELF ----------------------------------------------------------------------------------------

def _elf_inputs(data: bytes) -> st.SearchStrategy[bytes]:
    header = ElfFile("t.o", data).header
    table = range(header.shoff, min(header.shoff + header.shentsize * header.shnum, len(data)))
    return mutated_bytes([data], hot=[range(0, 64), table])


@examples(200)
@given(data=st.data())
def test_elf_headers_sections_and_symbols_read_or_are_refused(built, tmp_path, data):
    blob = data.draw(_elf_inputs(built["t.o"]))
    path = tmp_path / "mutated.o"
    path.write_bytes(blob)
    for elf in _opened(path, blob):
        with suppress(NotElf):
            elf.load_segments()
        for section in elf.sections:
            with suppress(NotElf):
                elf.data(section)
            elf.section_name(section.number)
        for name in (".symtab", ".dynsym"):
            with suppress(NotElf):
                table = elf.symbols(name)
                for row in list(table.rows() if table else [])[:50]:
                    table.name(row[0])  # type: ignore[union-attr]


def _opened(path: Path, blob: bytes) -> list[ElfFile]:
    opened = []
    for make in (lambda: ElfFile(path), lambda: ElfFile(path, buffer=blob)):
        with suppress(NotElf):
            opened.append(make())
    return opened


# --- compressed sections ------------------------------------------------------------------------

def _compressed_section(elf_bytes: bytes) -> bytes:
    elf = ElfFile("tz.o", elf_bytes)
    section = next(s for s in elf.sections if s.flags & 0x800 and s.name == ".debug_info")
    return elf.data(section)


def _as_zstd(section: bytes) -> bytes:
    """The same section compressed with zstd (ch_type 2) instead of zlib."""
    contents = inflate(section, True, "<", Path("tz.o"), ".debug_info")
    return struct.pack("<IIQQ", 2, 0, len(contents), 1) + zstandard.ZstdCompressor().compress(contents)


@examples(200)
@given(data=st.data())
def test_compressed_sections_inflate_or_are_refused(built, data):
    raw = _compressed_section(built["tz.o"])
    valid = [raw, raw[:30] + zlib.compress(b"x" * 100)[:8], _as_zstd(raw)]
    blob = data.draw(mutated_bytes(valid, hot=[range(0, 40)]))
    with suppress(UserError):
        inflate(blob, True, "<", Path("tz.o"), ".debug_info")


# --- BTF ----------------------------------------------------------------------------------------

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")


def _vmlinux_slice(types: int = 2000) -> bytes:
    """The running kernel's BTF header and its first ``types`` types, with the whole string section."""
    blob = VMLINUX_BTF.read_bytes()
    whole = btfmod.Btf(blob, str(VMLINUX_BTF))
    hdr_len, type_off, str_off, str_len = 24, 0, *btfmod.struct.unpack_from("<II", blob, 16)
    end = whole._offsets[types] - hdr_len  # where type ``types + 1`` starts, in the type section
    header = btfmod.struct.pack("<HBBIIIII", btfmod.MAGIC, 1, 0, hdr_len, type_off, end, end, str_len)
    return header + blob[hdr_len : hdr_len + end] + blob[hdr_len + str_off : hdr_len + str_off + str_len]


def _query_everything(btf: btfmod.Btf) -> None:
    for name in list(btf.function_names())[:20]:
        for ask in (btf.prototype, btf.params, btf.return_type):
            with suppress(btfmod.BtfError):
                ask(name)
    for type_id in list(btf.type_ids())[:300]:
        for ask in (btf.type_name, btf.size_of, btf.is_signed, btf.members, btf.enumerators, btf.pointee, btf.resolve):
            with suppress(btfmod.BtfError):
                ask(type_id)
        with suppress(btfmod.BtfError):
            btf.find_member(type_id, "next.value")
    with suppress(btfmod.BtfError):
        btf.find_type("struct node")


@pytest.fixture(scope="module")
def btf_blobs(built) -> list[bytes]:
    blobs = [built["t.btf"]]
    if VMLINUX_BTF.exists():
        blobs.append(_vmlinux_slice())
    return blobs


@examples(150)
@given(data=st.data())
def test_btf_opens_and_answers_or_is_refused(btf_blobs, data):
    blob = data.draw(st.sampled_from(btf_blobs))
    type_section = range(24, min(len(blob), 24 + 4000))
    mutated = data.draw(mutated_bytes([blob], hot=[range(0, 24), type_section], max_edits=4))
    try:
        btf = btfmod.Btf(mutated, "mutated.btf")
    except btfmod.BtfError:
        return
    _query_everything(btf)


# --- snapshot archives --------------------------------------------------------------------------

MANIFEST = {"release": "6.18.0", "captured": "2026-12-06T00:00:00Z", "missing": ["tracefs/dynamic_events: not present"]}
MEMBER_NAMES = ["manifest.json", "tracefs/README", "tracefs/kprobe_events", "proc/kallsyms", "btf/vmlinux", "btf/ext4",
                "debugfs/kprobes/blacklist", "tracefs/instances/.present"]


def _archive(members: list[tuple[str, bytes, bytes]], compress: str) -> bytes:
    """A snapshot archive of (name, type, contents) members."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode=f"w:{compress}") as archive:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return stream.getvalue()


MANIFEST_TEXTS = [json.dumps(MANIFEST), json.dumps({**MANIFEST, "missing": []}), "[]", "{}"]
member_names = st.one_of(st.sampled_from(MEMBER_NAMES), mutated_text(MEMBER_NAMES, ("/", "..", ".", "btf/", "\x00")))
members = st.tuples(member_names, st.sampled_from([tarfile.REGTYPE] * 4 + [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE]),
                    st.binary(max_size=64))


@examples(150)
@given(mutated_text(MANIFEST_TEXTS, ('"release"', '"missing"', "[", "{", "null", "1e999", "\\ud800")),
       st.lists(members, max_size=6), st.sampled_from(["gz", "xz"]), st.data())
@example(manifest="[" * 100000, extra=[], compress="gz", data=None)  # json's RecursionError
@example(manifest=json.dumps(MANIFEST), extra=[("btf/" + "a" * 300, tarfile.REGTYPE, b"")], compress="gz", data=None)
def test_snapshot_archives_open_or_are_refused(tmp_path_factory, manifest, extra, compress, data):
    blob = _archive([("manifest.json", tarfile.REGTYPE, manifest.encode(errors="surrogatepass")), *extra], compress)
    if data is not None:
        blob = data.draw(st.one_of(st.just(blob), mutated_bytes([blob], hot=[range(0, 64)], max_edits=2)))
    path = tmp_path_factory.mktemp("snapshot") / f"snap.tar.{compress}"
    path.write_bytes(blob)
    with suppress(UserError):
        open_snapshot(path)


# --- the config file ----------------------------------------------------------------------------

CONFIGS = ['theme = "dark"\n', 'theme = "monochrome"\nlast_binary = "/bin/true"\ncount = 3\nflag = true\n', "[table]\nx = 1\n"]


@examples(200)
@given(mutated_text(CONFIGS, ("=", '"', "'''", "[", "]", "[[", "{", "}", "\\u", "\\", "1979-05-27T07:32:00Z", "inf", "\n")),
       st.booleans())
@example("x = " + "[" * 100000, False)
def test_config_files_load_or_are_ignored(tmp_path_factory, text, as_latin1):
    path = tmp_path_factory.mktemp("config") / "config.toml"
    path.write_bytes(text.encode("latin-1", errors="replace") if as_latin1 else text.encode(errors="surrogatepass"))
    settings_read, problem = config.load(path)
    assert isinstance(settings_read, dict) and (problem is None or isinstance(problem, str))
    with suppress(UserError):
        config.choose_theme(None, path)


# --- export's CONFIG ----------------------------------------------------------------------------

EXPORT_CONFIGS = [GOOD_EXPORT_CONFIG, '[[metric]]\nname = "m"\nkind = "count"\nprobe = "f"\n']
EXPORT_TOKENS = ("[[metric]]", "name = ", "kind = ", '"hist"', '"latency"', "probe = ", "by = ", "value = ", "linear = ",
                 "unit = ", "max_series = ", "engine = ", "filter = ", "[", "]", ",", '"', "-1", "1e999", "inf", "\n")


@examples(200)
@given(mutated_text(EXPORT_CONFIGS, EXPORT_TOKENS))
@example("max_series = " + "[" * 100000)  # tomllib's RecursionError, once
def test_export_configs_read_or_are_refused(text):
    with suppress(UserError):
        exportconfig.parse(text, "export.toml")
