"""A small reader for BTF, the kernel's compact type information (no libbpf, no bpftool).

The function catalog shows prototypes from it, and the probe compiler turns ``p->field`` into
offsets from it on kernels without DWARF. The vmlinux blob holds ~130k types, so opening is one
pass that only records where each type starts and which FUNC names exist; types are decoded
when asked for, and rendered declarations are cached.

    btf = Btf.load(Path("/sys/kernel/btf/vmlinux"))          # or an ELF file (vmlinux, .ko) with a .BTF section
    ext4 = Btf.load(Path("/sys/kernel/btf/ext4"), base=btf)  # split BTF: ids and strings follow the base's
    btf.function_names(), btf.has_function(name)             # the blob's own FUNCs
    btf.prototype("vfs_read")  # 'ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)'
    btf.params(name)       -> [Param(name, type_id, c_type)]; a variadic function ends with Param("...", 0, "...")
    btf.return_type(name)  -> type id (0 is void)
    btf.type_ids(), btf.kind(id) (KIND_NAMES[kind]), btf.name(id)
    btf.find_type("struct sock") -> type id or None ("struct X", "union X", "enum X", or a typedef/base name)
    btf.resolve(id)        -> id with typedef/const/volatile/restrict/type_tag skipped
    btf.type_name(id)      -> C spelling ("struct file *", "void (*)(int)", "char[16]")
    btf.declare(id, name)  -> C declaration ("void (*cb)(int)", "char comm[16]")
    btf.size_of(id), btf.is_signed(id), btf.is_pointer(id), btf.pointee(id)
    btf.members(id)        -> [Member(name, type_id, bit_offset, bitfield_size)]; anonymous members have name ""
    btf.find_member(id, "__sk_common.skc_state") -> [MemberStep(member, byte_offset, bit_offset, bitfield_size)]
    btf.enumerators(id)    -> [(name, value)]

Offsets in ``MemberStep`` count from the start of the outermost struct: ``bit_offset`` in bits and
``byte_offset`` the byte holding its first bit. Every failure is a ``BtfError`` naming the file.
"""

from __future__ import annotations

import difflib
import struct
from array import array
from collections.abc import KeysView
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB, NoSuchFile, open_regular

MAGIC = 0xEB9F
VERSION = 1
HEADER_SIZE = 24

# Kinds, as numbered in include/uapi/linux/btf.h (0 is void).
VOID, INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)
KIND_NAMES = (
    "void", "INT", "PTR", "ARRAY", "STRUCT", "UNION", "ENUM", "FWD", "TYPEDEF", "VOLATILE", "CONST",
    "RESTRICT", "FUNC", "FUNC_PROTO", "VAR", "DATASEC", "FLOAT", "DECL_TAG", "TYPE_TAG", "ENUM64",
)
# Bytes that follow the 12-byte common header: a fixed part plus one record per vlen item.
_FIXED_EXTRA = (0, 4, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 4, 0, 0)
_ITEM_EXTRA = (0, 0, 0, 0, 12, 12, 8, 0, 0, 0, 0, 0, 0, 8, 0, 12, 0, 0, 0, 12)
_TAGS = {STRUCT: "struct", UNION: "union", ENUM: "enum", ENUM64: "enum"}
_QUALIFIERS = {CONST: "const", VOLATILE: "volatile", RESTRICT: "restrict"}
_TRANSPARENT = frozenset((TYPEDEF, CONST, VOLATILE, RESTRICT, TYPE_TAG))
_SIZED = frozenset((INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC))
_INT_SIGNED = 1
_MAX_DEPTH = 128  # deeper type chains only come from a corrupt (cyclic) blob
MAX_BTF = 64 * MiB  # a distribution vmlinux's BTF is ~5 MB; a file named on the command line may be anything


class BtfError(UserError):
    """A BTF blob that is missing, corrupt, or does not hold what was asked for."""


class Param(NamedTuple):
    name: str
    type_id: int
    c_type: str


class Member(NamedTuple):
    name: str  # "" for an anonymous struct/union member
    type_id: int
    bit_offset: int  # from the start of the struct holding it
    bitfield_size: int  # 0 unless a bitfield


class MemberStep(NamedTuple):
    member: Member
    byte_offset: int  # from the start of the outermost struct
    bit_offset: int  # from the start of the outermost struct
    bitfield_size: int


class _Type(NamedTuple):
    """One decoded common header; ``extra`` is where its kind-specific records start in ``owner``."""

    owner: Btf
    extra: int
    kind: int
    vlen: int
    kind_flag: int
    name_off: int
    ref: int  # size or type id, by kind


class Btf:
    """One BTF blob (vmlinux, or a module's split BTF on top of ``base``)."""

    def __init__(self, data: bytes, source: str, base: Btf | None = None) -> None:
        self.source = source
        self.base = base
        self._data = data
        self._parse_header()
        self._start_id: int = base._start_id + len(base._offsets) if base else 1
        self._base_str_len: int = base._base_str_len + base._str_len if base else 0
        self._offsets: array[int] = array("I")
        self._functions: dict[str, int] = {}
        self._declarators: dict[int, tuple[str, str]] = {}
        self._prototypes: dict[str, str] = {}
        self._members: dict[int, list[Member]] = {}
        self._named_types: dict[tuple[str, str], int] | None = None
        self._pointer_size = 0
        self._index_types()

    @classmethod
    def load(cls, path: Path, base: Btf | None = None) -> Btf:
        """Open a raw BTF blob (or an ELF file's .BTF section); ``base`` for a module's split BTF."""
        path = Path(path)
        try:
            with open_regular(path, "BTF file") as stream:
                if stream.peek(4)[:4] == b"\x7fELF":  # a vmlinux or .ko: only its .BTF section is read
                    data = _elf_btf_section(path, stream)
                else:
                    data = stream.read(MAX_BTF + 1)
        except NoSuchFile:
            raise BtfError(f"{path}: no such BTF file", "the kernel needs CONFIG_DEBUG_INFO_BTF=y") from None
        except BtfError:
            raise
        except UserError as exc:
            raise BtfError(exc.message, exc.hint) from None
        except OSError as exc:
            raise BtfError(f"{path}: cannot read: {exc.strerror}") from None
        if len(data) > MAX_BTF:
            raise BtfError(f"{path}: larger than {MAX_BTF // MiB} MiB, more than any kernel's BTF", "give the BTF file itself")
        return cls(data, str(path), base)

    @classmethod
    def shared(cls, path: str | Path | None = None) -> Btf:
        """One parsed copy per file for the whole process: the builder recompiles on every pause in
        typing, and parsing vmlinux's 5 MB of BTF takes ~80 ms each time."""
        return _shared(str(path or "/sys/kernel/btf/vmlinux"))

    # --- opening ------------------------------------------------------------------------------

    def _fail(self, what: str, hint: str = "") -> BtfError:
        return BtfError(f"{self.source}: {what}", hint)

    def _parse_header(self) -> None:
        data = self._data
        if len(data) < HEADER_SIZE:
            raise self._fail(
                f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte BTF header", "the file is truncated"
            )
        if data[:2] == b"\x9f\xeb":
            order = "<"
        elif data[:2] == b"\xeb\x9f":
            order = ">"
        else:
            raise self._fail(
                f"not BTF: magic is 0x{data[0]:02x}{data[1]:02x}, expected 0x{MAGIC:04x}",
                "give a raw BTF blob (/sys/kernel/btf/vmlinux) or an ELF file with a .BTF section",
            )
        _, version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(order + "HBBIIIII", data)
        if version != VERSION:
            raise self._fail(f"unknown BTF version {version} (this reader knows version {VERSION})")
        if not HEADER_SIZE <= hdr_len <= len(data):
            raise self._fail(f"header length {hdr_len} is outside 24..{len(data)}", "the file is corrupt")
        for section, offset, length in (("type", type_off, type_len), ("string", str_off, str_len)):
            if hdr_len + offset + length > len(data):
                raise self._fail(
                    f"the {section} section (bytes {hdr_len + offset}..{hdr_len + offset + length}) "
                    f"runs past the end of the file ({len(data)} bytes)",
                    "the file is truncated",
                )
        self._type_start, self._type_end = hdr_len + type_off, hdr_len + type_off + type_len
        self._str_start, self._str_len = hdr_len + str_off, str_len
        if str_len and data[self._str_start + str_len - 1] != 0:
            raise self._fail("the string section does not end with a NUL byte", "the file is truncated or corrupt")
        self._u32x3 = struct.Struct(order + "III")
        self._order = order

    def _index_types(self) -> None:
        """The one pass: where each type starts, and the id of each FUNC by name."""
        data, end = self._data, self._type_end
        unpack = self._u32x3.unpack_from
        record = self._offsets.append
        functions = self._functions
        fixed, per_item = _FIXED_EXTRA, _ITEM_EXTRA
        type_id, pos = self._start_id, self._type_start
        while pos < end:
            if pos + 12 > end:
                raise self._fail(
                    f"type {type_id} at byte {pos} runs past the end of the type section", "the file is truncated"
                )
            name_off, info, _ = unpack(data, pos)
            kind = (info >> 24) & 0x1F
            if not 0 < kind <= ENUM64:
                raise self._fail(f"type {type_id} has unknown kind {kind}", "a newer kernel's BTF? update kprobe-tui")
            if kind == FUNC:
                functions.setdefault(self._string(name_off), type_id)
            record(pos)
            pos += 12 + fixed[kind] + per_item[kind] * (info & 0xFFFF)
            type_id += 1
        if pos != end:
            raise self._fail(f"type {type_id - 1} runs past the end of the type section", "the file is truncated")

    # --- raw access ---------------------------------------------------------------------------

    def _string(self, offset: int) -> str:
        # only split BTF has a base: without one, _base_str_len is 0 and _start_id 1, so these tests fail anyway
        if offset < self._base_str_len and self.base is not None:
            return self.base._string(offset)
        start = offset - self._base_str_len
        if start >= self._str_len:
            hint = "" if self.base else "module BTF is split BTF: load it with base= the vmlinux BTF"
            raise self._fail(f"string offset {offset} is past the string section ({self._str_len} bytes)", hint)
        start += self._str_start
        return self._data[start : self._data.index(b"\0", start)].decode("utf-8", "replace")

    def _type(self, type_id: int) -> _Type:
        if type_id == 0:
            return _Type(self, 0, VOID, 0, 0, 0, 0)
        if 0 < type_id < self._start_id and self.base is not None:
            return self.base._type(type_id)
        index = type_id - self._start_id
        if not 0 <= index < len(self._offsets):
            last = self._start_id + len(self._offsets) - 1
            raise self._fail(f"type id {type_id} is out of range (the last type is {last})", "the file is corrupt")
        pos = self._offsets[index]
        name_off, info, ref = self._u32x3.unpack_from(self._data, pos)
        return _Type(self, pos + 12, (info >> 24) & 0x1F, info & 0xFFFF, info >> 31, name_off, ref)

    def _records(self, t: _Type, fmt: str) -> list[tuple]:
        size = struct.calcsize(fmt)
        chunk = t.owner._data[t.extra : t.extra + size * t.vlen]
        return list(struct.iter_unpack(t.owner._order + fmt, chunk))

    def _array(self, t: _Type) -> tuple[int, int]:
        """(element type id, element count) of an ARRAY."""
        elem, _index_type, count = t.owner._u32x3.unpack_from(t.owner._data, t.extra)
        return elem, count

    def _function(self, name: str) -> _Type:
        """The FUNC_PROTO of function ``name``."""
        type_id = self._functions.get(name)
        if type_id is None:
            close = difflib.get_close_matches(name, [n for n in self._functions if n[:2] == name[:2]], n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "kprobe-tui funcs PATTERN lists the functions"
            raise self._fail(f"no function {name!r} in this BTF", hint)
        proto = self._type(self._type(type_id).ref)
        if proto.kind != FUNC_PROTO:
            raise self._fail(
                f"function {name!r} points at a {KIND_NAMES[proto.kind]}, not a FUNC_PROTO", "the file is corrupt"
            )
        return proto

    # --- functions ----------------------------------------------------------------------------

    def function_names(self) -> KeysView[str]:
        return self._functions.keys()

    def has_function(self, name: str) -> bool:
        return name in self._functions

    def prototype(self, name: str) -> str | None:
        """``name``'s declaration as C, or None when this BTF has no such function."""
        cached = self._prototypes.get(name)
        if cached is None and name in self._functions:
            cached = self._prototypes[name] = _spell(self._declarator(self._type(self._functions[name]).ref), name)
        return cached

    def params(self, name: str) -> list[Param]:
        return [
            Param("...", 0, "...") if param_name == "..." else Param(param_name, type_id, self.type_name(type_id))
            for param_name, type_id in self._proto_params(self._function(name))
        ]

    def return_type(self, name: str) -> int:
        return self._function(name).ref

    # --- type queries -------------------------------------------------------------------------

    def type_ids(self) -> range:
        """This blob's own type ids (a split blob's start after its base's)."""
        return range(self._start_id, self._start_id + len(self._offsets))

    def kind(self, type_id: int) -> int:
        """One of the kind constants (INT, PTR, STRUCT, ...); KIND_NAMES[kind] spells it."""
        return self._type(type_id).kind

    def name(self, type_id: int) -> str:
        """The type's own name ("" when anonymous): "sock" for struct sock."""
        return self._string(self._type(type_id).name_off)

    def resolve(self, type_id: int) -> int:
        """``type_id`` with typedefs, qualifiers and type tags skipped."""
        for _ in range(_MAX_DEPTH):
            t = self._type(type_id)
            if t.kind not in _TRANSPARENT:
                return type_id
            type_id = t.ref
        raise self._fail(f"type chain through id {type_id} does not end", "the file is corrupt")

    def type_name(self, type_id: int) -> str:
        """C spelling; FUNC and VAR types are spelled with their own name as the declarator."""
        t = self._type(type_id)
        own_name = self._string(t.name_off) if t.kind in (FUNC, VAR) else ""
        return _spell(self._declarator(type_id), own_name)

    def declare(self, type_id: int, name: str) -> str:
        """C declaration of ``name`` with this type: "void (*cb)(int)", "char comm[16]"."""
        return _spell(self._declarator(type_id), name)

    def size_of(self, type_id: int) -> int:
        factor = 1  # arrays multiply their element's size
        for _ in range(_MAX_DEPTH):
            t = self._type(self.resolve(type_id))
            if t.kind in _SIZED:
                return factor * t.ref
            if t.kind == PTR:
                return factor * self._pointer_bytes()
            if t.kind != ARRAY:
                raise self._fail(f"{self.type_name(type_id)!r} has no size")
            type_id, count = self._array(t)
            factor *= count
        raise self._fail(f"type chain through id {type_id} does not end", "the file is corrupt")

    def is_signed(self, type_id: int) -> bool:
        t = self._type(self.resolve(type_id))
        if t.kind == INT:
            encoding = struct.unpack_from(t.owner._order + "I", t.owner._data, t.extra)[0] >> 24
            return bool(encoding & _INT_SIGNED)
        if t.kind in (ENUM, ENUM64):
            return bool(t.kind_flag)
        if t.kind == FLOAT:
            return True
        if t.kind == PTR:
            return False
        raise self._fail(f"{self.type_name(type_id)!r} is not a number or pointer")

    def is_pointer(self, type_id: int) -> bool:
        return self._type(self.resolve(type_id)).kind == PTR

    def pointee(self, type_id: int) -> int:
        t = self._type(self.resolve(type_id))
        if t.kind != PTR:
            raise self._fail(f"{self.type_name(type_id)!r} is not a pointer")
        return t.ref

    def find_type(self, spelling: str) -> int | None:
        """The id of "struct NAME", "union NAME", "enum NAME" or a typedef/base type name."""
        tag, _, name = spelling.strip().partition(" ")
        key = (tag, name.strip()) if tag in ("struct", "union", "enum") else ("", spelling.strip())
        if self._named_types is None:
            self._named_types = self._index_named_types()
        found = self._named_types.get(key)
        if found is None and self.base is not None:
            return self.base.find_type(spelling)
        return found

    def _index_named_types(self) -> dict[tuple[str, str], int]:
        tags = {**_TAGS, TYPEDEF: "", INT: "", FLOAT: ""}
        named: dict[tuple[str, str], int] = {}
        unpack = self._u32x3.unpack_from
        for index, pos in enumerate(self._offsets):
            name_off, info, _ = unpack(self._data, pos)
            tag = tags.get((info >> 24) & 0x1F)
            if tag is not None and name_off:
                named.setdefault((tag, self._string(name_off)), self._start_id + index)
        return named

    def members(self, type_id: int) -> list[Member]:
        """The members of a struct or union, anonymous struct/union members included (name "")."""
        type_id = self.resolve(type_id)
        cached = self._members.get(type_id)
        if cached is not None:
            return cached
        t = self._type(type_id)
        if t.kind not in (STRUCT, UNION):
            raise self._fail(f"{self.type_name(type_id)!r} is not a struct or union, it has no members")
        # With kind_flag set (pahole sets it on every struct with bitfields since Linux 5.0, before any kernel
        # had /sys/kernel/btf) the offset word holds the bitfield size in its top 8 bits.
        found = [
            Member(self._string(name_off), member_type, offset & 0xFFFFFF, offset >> 24)
            if t.kind_flag
            else Member(self._string(name_off), member_type, offset, 0)
            for name_off, member_type, offset in self._records(t, "III")
        ]
        self._members[type_id] = found
        return found

    def find_member(self, type_id: int, path: str) -> list[MemberStep]:
        """The members ``a.b.c`` goes through, with anonymous struct/union members on the way."""
        steps: list[MemberStep] = []
        bits = 0
        current = type_id
        parts = path.split(".")
        for i, part in enumerate(parts):
            if not part:
                raise BtfError(f"empty member name in {path!r}", "write members as a.b.c")
            if steps and self.is_pointer(current):
                raise BtfError(
                    f"{steps[-1].member.name!r} is a pointer ({self.type_name(current)}), not a struct",
                    f"dereference it: {'.'.join(parts[:i])}->{'.'.join(parts[i:])}",
                )
            chain = self._member_chain(current, part, 0)
            if chain is None:
                names = self._visible_member_names(current)
                close = difflib.get_close_matches(part, names, n=3)
                hint = f"did you mean {', '.join(close)}?" if close else f"members: {', '.join(names[:12])}"
                raise BtfError(f"{self.type_name(current)} has no member {part!r}", hint)
            for member in chain:
                bits += member.bit_offset
                steps.append(MemberStep(member, bits // 8, bits, member.bitfield_size))
            current = chain[-1].type_id
        return steps

    def _member_chain(self, type_id: int, name: str, depth: int) -> list[Member] | None:
        if depth > _MAX_DEPTH:
            raise self._fail(f"struct nesting through id {type_id} does not end", "the file is corrupt")
        members = self.members(type_id)
        for member in members:
            if member.name == name:
                return [member]
        for member in members:
            if not member.name and self.kind(self.resolve(member.type_id)) in (STRUCT, UNION):
                inner = self._member_chain(member.type_id, name, depth + 1)
                if inner:
                    return [member, *inner]
        return None

    def _visible_member_names(self, type_id: int) -> list[str]:
        names = []
        for member in self.members(type_id):
            if member.name:
                names.append(member.name)
            elif self.kind(self.resolve(member.type_id)) in (STRUCT, UNION):
                names.extend(self._visible_member_names(member.type_id))
        return names

    def enumerators(self, type_id: int) -> list[tuple[str, int]]:
        t = self._type(self.resolve(type_id))
        if t.kind == ENUM:
            return [(self._string(n), v) for n, v in self._records(t, "Ii" if t.kind_flag else "II")]
        if t.kind == ENUM64:
            values = []
            for name_off, low, high in self._records(t, "III"):
                value = high << 32 | low
                if t.kind_flag and value >= 1 << 63:
                    value -= 1 << 64
                values.append((self._string(name_off), value))
            return values
        raise self._fail(f"{self.type_name(type_id)!r} is not an enum")

    def _pointer_bytes(self) -> int:
        """BTF does not record the pointer size: take it from ``long``, as libbpf does."""
        if not self._pointer_size:
            root = self
            while root.base is not None:
                root = root.base
            long_id = root.find_type("long int") or root.find_type("long")  # gcc's and clang's spelling
            root._pointer_size = self._pointer_size = root._type(long_id).ref if long_id else 8
        return self._pointer_size

    # --- C declarations -----------------------------------------------------------------------

    def _declarator(self, type_id: int, depth: int = 0) -> tuple[str, str]:
        """(prefix, suffix) such that prefix + NAME + suffix declares NAME with this type."""
        if 0 < type_id < self._start_id and self.base is not None:
            return self.base._declarator(type_id, depth)
        cached = self._declarators.get(type_id)
        if cached is not None:
            return cached
        if depth > _MAX_DEPTH:
            raise self._fail(f"type chain through id {type_id} does not end", "the file is corrupt")
        t = self._type(type_id)
        kind = t.kind
        if kind == PTR:
            prefix, suffix = self._declarator(t.ref, depth + 1)
            if self._type(self._skip_qualifiers(t.ref)).kind in (ARRAY, FUNC_PROTO):
                result = (prefix + "(*", ")" + suffix)
            else:
                result = (prefix + "*", suffix)
        elif kind in _QUALIFIERS:
            prefix, suffix = self._declarator(t.ref, depth + 1)
            qualifier = _QUALIFIERS[kind]
            if self._type(self._skip_qualifiers(t.ref)).kind == PTR:
                result = (prefix + qualifier + " ", suffix)
            else:
                result = (qualifier + " " + prefix, suffix)
        elif kind == ARRAY:
            elem, count = self._array(t)
            prefix, suffix = self._declarator(elem, depth + 1)
            result = (prefix, f"[{count or ''}]" + suffix)
        elif kind == FUNC_PROTO:
            prefix, suffix = self._declarator(t.ref, depth + 1)
            result = (prefix, f"({self._param_list(t, depth)})" + suffix)
        elif kind in (FUNC, VAR, TYPE_TAG):
            result = self._declarator(t.ref, depth + 1)
        else:
            result = (self._base_spelling(t) + " ", "")
        self._declarators[type_id] = result
        return result

    def _skip_qualifiers(self, type_id: int) -> int:
        """``type_id`` with qualifiers and type tags skipped, not typedefs: a typedef'd pointer is spelled by name."""
        for _ in range(_MAX_DEPTH):
            t = self._type(type_id)
            if t.kind not in _QUALIFIERS and t.kind != TYPE_TAG:
                return type_id
            type_id = t.ref
        raise self._fail(f"type chain through id {type_id} does not end", "the file is corrupt")

    def _proto_params(self, proto: _Type) -> list[tuple[str, int]]:
        """(name, type id) of each parameter; a last one with no name and type 0 means "..." (variadic)."""
        records = self._records(proto, "II")
        found = [(self._string(name_off), type_id) for name_off, type_id in records]
        if records and records[-1] == (0, 0):
            found[-1] = ("...", 0)
        return found

    def _param_list(self, proto: _Type, depth: int) -> str:
        spelled = [
            "..." if name == "..." else _spell(self._declarator(type_id, depth + 1), name)
            for name, type_id in self._proto_params(proto)
        ]
        return ", ".join(spelled) or "void"

    def _base_spelling(self, t: _Type) -> str:
        if t.kind == VOID:
            return "void"
        name = self._string(t.name_off)
        tag = _TAGS.get(t.kind)
        if t.kind == FWD:
            tag = "union" if t.kind_flag else "struct"  # the kind_flag of a FWD says union
        return f"{tag} {name or '{...}'}" if tag else name


def _spell(declarator: tuple[str, str], name: str) -> str:
    prefix, suffix = declarator
    return prefix + name + suffix if name else prefix.rstrip() + suffix


def _elf_btf_section(path: Path, stream) -> bytes:
    """The .BTF section of an ELF file (a vmlinux image or a .ko)."""
    from elftools.common.exceptions import ELFError  # here: pyelftools costs ~33 ms to import (-X importtime); only BTF in an ELF file needs it
    from elftools.elf.elffile import ELFFile  # (the ~33 ms above)

    try:
        section = ELFFile(stream).get_section_by_name(".BTF")
        if section is None:
            raise BtfError(f"{path}: this ELF file has no .BTF section", "add one with pahole -J, or give raw BTF")
        if section["sh_size"] > MAX_BTF:
            raise BtfError(f"{path}: its .BTF section is larger than {MAX_BTF // MiB} MiB", "give the BTF file itself")
        return section.data()
    except (ELFError, ValueError, struct.error) as exc:
        raise BtfError(f"{path}: not a readable ELF file: {exc}") from None


@lru_cache(maxsize=4)
def _shared(path: str) -> Btf:
    return Btf.load(Path(path))
