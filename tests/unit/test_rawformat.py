"""The decoder of raw trace records: the Event the kernel's text gives, from a record's bytes and its event's format."""

from __future__ import annotations

import re
import struct

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.stream.ksyms import KernelSymbols
from kprobe_tui.stream.parser import Event, LineParser
from kprobe_tui.stream.rawformat import RecordError, compile_format, latency_flags

# Captured once from this machine's kernel (6.18): a uprobe with every fetch type the kernel prints
# differently (u8 s16 u32 x64 s64 x8 x16 x32 string u8[4] x8[2] ustring s8 bitfield char s16[2], and a
# string from a NULL pointer), a uretprobe, records read from trace_pipe_raw and the lines `trace` printed.
HIT_FORMAT = (
    'name: hit\n'
    'ID: 2327\n'
    'format:\n'
    '\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n'
    '\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n'
    '\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n'
    '\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n'
    '\n'
    '\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n'
    '\tfield:u8 a;\toffset:16;\tsize:1;\tsigned:0;\n'
    '\tfield:s16 b;\toffset:17;\tsize:2;\tsigned:1;\n'
    '\tfield:u32 c;\toffset:19;\tsize:4;\tsigned:0;\n'
    '\tfield:u64 d;\toffset:23;\tsize:8;\tsigned:0;\n'
    '\tfield:s64 e;\toffset:31;\tsize:8;\tsigned:1;\n'
    '\tfield:u8 f;\toffset:39;\tsize:1;\tsigned:0;\n'
    '\tfield:u16 g;\toffset:40;\tsize:2;\tsigned:0;\n'
    '\tfield:u32 h;\toffset:42;\tsize:4;\tsigned:0;\n'
    '\tfield:__data_loc char[] s;\toffset:46;\tsize:4;\tsigned:1;\n'
    '\tfield:u8 arr[];\toffset:50;\tsize:4;\tsigned:0;\n'
    '\tfield:u8 xs[];\toffset:54;\tsize:2;\tsigned:0;\n'
    '\tfield:__data_loc char[] ss;\toffset:56;\tsize:4;\tsigned:1;\n'
    '\tfield:s8 i;\toffset:60;\tsize:1;\tsigned:1;\n'
    '\tfield:u64 bf;\toffset:61;\tsize:8;\tsigned:0;\n'
    '\tfield:u8 chr;\toffset:69;\tsize:1;\tsigned:0;\n'
    '\tfield:s16 sa[];\toffset:70;\tsize:4;\tsigned:1;\n'
    '\tfield:__data_loc char[] nil;\toffset:74;\tsize:4;\tsigned:1;\n'
    '\n'
    'print fmt: "(%lx) a=%u b=%d c=%u d=0x%Lx e=%Ld f=0x%x g=0x%x h=0x%x s=\\"%s\\" arr={%u,%u,%u,%u} xs={0x%x,0x%x} ss=\\"%s\\"'
    ' i=%d bf=%Lu chr=\'%c\' sa={%d,%d}'
    ' nil=\\"%s\\""'
    ', REC->__probe_ip, REC->a, REC->b, REC->c, REC->d, REC->e, REC->f, REC->g, REC->h, __get_str(s), REC->arr[0], REC->arr[1],'
    ' REC->arr[2], REC->arr[3], REC->xs[0], REC->xs[1],'
    ' __get_str(ss), REC->i, REC->bf, REC->chr, REC->sa[0], REC->sa[1], __get_str(nil)\n'
)

HITR_FORMAT = (
    'name: hitr\n'
    'ID: 2326\n'
    'format:\n'
    '\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n'
    '\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n'
    '\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n'
    '\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n'
    '\n'
    '\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n'
    '\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n'
    '\tfield:s32 ret;\toffset:24;\tsize:4;\tsigned:1;\n'
    '\tfield:u64 r2;\toffset:28;\tsize:8;\tsigned:0;\n'
    '\n'
    'print fmt: "(%lx <- %lx) ret=%d r2=0x%Lx", REC->__probe_func, REC->__probe_ret_ip, REC->ret, REC->r2\n'
)

ALPHA = bytes.fromhex(
    "1709ffffa974000039f1d1204a560000fdfdfffdfffffffdfffffffffffffffdfffffffffffffffdfdfffdffffff4e00060000c807ff"
    "00c854000600fd070000000000000061616c70685a000000616c70686100616c70686100ffff")
ALPHA_LINE = ("            prog-29865   [000] DBZff  2712.843561: hit: (0x564a20d1f139) a=253 b=-3 c=4294967293"
              " d=0xfffffffffffffffd e=-3 f=0xfd g=0xfffd h=0xfffffffd s=\"alpha\" arr={0,200,7,255} xs={0x0,0xc8}"
              " ss=\"alpha\" i=-3 bf=7 chr='a' sa={27745,26736} nil=(fault)")
EMPTY = bytes.fromhex(
    "1709ffffa974000039f1d1204a560000b5b50bb50b0000b50b000000000000b50b000000000000b5b50bb50b00004e00010003c807ff"
    "03c84f000100b50500000000000000000000011b500000000000")
EMPTY_LINE = ("            prog-29865   [000] DBZff  2712.843631: hit: (0x564a20d1f139) a=181 b=2997 c=2997 d=0xbb5"
              " e=2997 f=0xb5 g=0xbb5 h=0xbb5 s=\"\" arr={3,200,7,255} xs={0x3,0xc8} ss=\"\" i=-75 bf=5 chr='\x00'"
              " sa={0,6913} nil=(fault)")
RETURN = bytes.fromhex("1609ffffa974000039f1d1204a560000b3f1d1204a5600005e0000005e00000000000000")
RETURN_LINE = "            prog-29865   [000] DBZff  2712.843594: hitr: (0x564a20d1f1b3 <- 0x564a20d1f139) ret=94 r2=0x5e"


def text_event(line: str) -> Event:
    parser = LineParser()
    [event] = parser.feed([line]) + parser.flush()
    return event


@pytest.mark.parametrize(("fmt", "record", "line"), [(HIT_FORMAT, ALPHA, ALPHA_LINE), (HIT_FORMAT, EMPTY, EMPTY_LINE),
                                                      (HITR_FORMAT, RETURN, RETURN_LINE)])
def test_a_record_decodes_to_the_event_of_the_line_the_kernel_printed(fmt, record, line):
    expected = text_event(line)
    decoded = compile_format(fmt).decode(record, expected.ts, expected.cpu, expected.comm)
    assert decoded.printed() == expected
    assert decoded.body == expected.body and decoded.site == expected.site
    assert decoded.args == expected.args  # and so the typed arguments, for filters and JSON


def test_the_decoder_knows_its_event():
    decoder = compile_format(HITR_FORMAT)
    assert (decoder.name, decoder.id) == ("hitr", 2326)


def test_a_record_cut_short_is_a_record_error():
    decoder = compile_format(HIT_FORMAT)
    with pytest.raises(RecordError, match="shorter than its fixed"):
        decoder.decode(ALPHA[:40], 1.0, 0, "prog")
    cut = decoder.decode(ALPHA[:-8], 1.0, 0, "prog")  # the fixed part whole, the strings cut: said when printed
    assert "(string ss runs past the end of its record: 84+6 > 84)" in cut.body


def test_a_record_of_another_event_is_a_record_error():
    with pytest.raises(RecordError, match="event type 2327 was given to the decoder of hitr"):
        compile_format(HITR_FORMAT).decode(ALPHA, 1.0, 0, "prog")


def test_a_record_error_is_a_user_error():
    """Whoever does not count them shows them as any other error: never a traceback."""
    assert issubclass(RecordError, UserError)


def test_a_string_location_outside_the_record_is_said_in_the_body():
    location = struct.pack("<I", (200 << 16) | 0xFFF0)  # offset 65520, 200 bytes
    record = bytearray(ALPHA)
    record[46:50] = location  # the field s
    body = compile_format(HIT_FORMAT).decode(bytes(record), 1.0, 0, "prog").body
    assert ' s=(string s runs past the end of its record: 65520+200 > 92) arr={0,200,7,255}' in body


def test_a_string_holding_a_newline_and_bytes_that_are_not_utf8_reads_as_the_text_reader_shows_it():
    record = bytearray(ALPHA)
    record[78:84] = b"a\nb\xff\xc3\xa9"  # "alpha\0" of s becomes these six bytes (no NUL: the length says where it ends)
    decoded = compile_format(HIT_FORMAT).decode(bytes(record), 1.0, 0, "prog")
    assert decoded.args["s"] == "a\nb\\xffé"


@pytest.mark.parametrize(("flags", "preempt", "column"), [
    (0x00, 0x00, "....."), (0x01, 0x01, "d..1."), (0x81, 0x00, "D...."), (0x80, 0x21, "b..12"),
    (0x04, 0, ".n..."), (0x02, 0, ".l..."), (0x20, 0, ".p..."), (0x24, 0, ".N..."), (0x22, 0, ".L..."),
    (0x06, 0, ".b..."), (0x26, 0, ".B..."), (0x08, 0, "..h.."), (0x10, 0, "..s.."), (0x18, 0, "..H.."),
    (0x40, 0, "..z.."), (0x48, 0, "..Z.."), (0xFF, 0xFF, "DBZff"),
])
def test_the_flags_column_is_the_kernels(flags, preempt, column):
    assert latency_flags(flags, preempt) == column


TRACEPOINT = """name: sched_kthread_stop
ID: 326
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;

print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid
"""


def test_a_tracepoint_with_a_fixed_char_array_prints_by_its_print_fmt():
    record = struct.pack("<HBBi16si", 326, 0, 0, 7, b"kworker/0:1\0junk", -2)
    assert compile_format(TRACEPOINT).decode(record, 1.5, 3, "kworker/0:1").body == "comm=kworker/0:1 pid=-2 %"


@pytest.mark.parametrize(("change", "complaint"), [
    (("ID: 326\n", ""), "no name: or ID: line"),
    (("\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n", ""), "no common_pid"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%p", REC->pid'), "cannot render"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%999999999d", REC->pid'), "cannot render"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "f=%s", __print_flags(REC->pid, "|")'),
     "cannot render"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%d", REC->nosuch'), "does not have: nosuch"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%d %d", REC->pid'), "2 conversions for 1"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%s", REC->pid'), "with %s"),
    (('print fmt: "comm=%s pid=%d %%", REC->comm, REC->pid', 'print fmt: "pid=%d'), "no closing quote"),
    (("offset:24;\tsize:4;", "offset:20;\tsize:4;"), "overlaps"),
    (("offset:24;\tsize:4;", "offset:99999999999;\tsize:4;"), "cannot read"),
    (("offset:24;\tsize:4;", "offset:24;\tsize:3;"), "3-byte values"),
])
def test_a_format_it_cannot_render_is_a_user_error_naming_it(change, complaint):
    with pytest.raises(UserError, match=complaint):
        compile_format(TRACEPOINT.replace(*change))


KALLSYMS = (
    "0000000000000000 A fixed_percpu_data\n"  # x86-64's per-CPU symbols start at 0, whoever reads them
    "ffffffff81000000 T _stext\n"
    "ffffffff81100000 T vfs_read\n"
    "ffffffff81100000 t vfs_read_alias\n"  # of several symbols at one address, the first listed names it
    "ffffffff811001a0 T vfs_write\n"
    "ffffffff81200000 T __kretprobe_trampoline\n"
    "ffffffff81200040 T ksys_read\n"
    "ffffffff81200100 T ksys_write\n"
    "ffffffffc0001040 t mod_next\t[mymod]\n"  # a module's symbols come unsorted
    "ffffffffc0001000 t mod_fn\t[mymod]\n"
)
KPROBE_FORMAT = """name: vr
ID: 2400
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;
\tfield:u32 count;\toffset:16;\tsize:4;\tsigned:0;
\tfield:u64 caller;\toffset:20;\tsize:8;\tsigned:0;

print fmt: "(%lx) count=%u caller=%pS", REC->__probe_ip, REC->count, REC->caller
"""
KRETPROBE_FORMAT = HITR_FORMAT.replace("name: hitr", "name: vrr")


@pytest.fixture
def symbols(tmp_path) -> KernelSymbols:
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    return KernelSymbols(str(tmp_path / "kallsyms"))


def test_kernel_addresses_are_named_as_the_kernel_names_them(symbols):
    assert symbols.site(0xFFFFFFFF81100000, offset=True) == "vfs_read+0x0/0x1a0"
    assert symbols.site(0xFFFFFFFF81100008, offset=False) == "vfs_read"
    assert symbols.site(0xFFFFFFFFC0001008, offset=True) == "mod_fn+0x8/0x40 [mymod]"
    assert symbols.site(0xFFFFFFFF81200000, offset=True) == "[unknown/kretprobe'd]"
    assert (symbols.site(0, offset=True), symbols.site(0x10, offset=True), symbols.pointer(0x10)) == ("0", "0x00000010", "0x10")


def test_a_kernel_probe_prints_its_site_and_symbol_arguments_by_kallsyms(symbols):
    record = struct.pack("<HBBiQIQ", 2400, 0, 0, 7, 0xFFFFFFFF81100000, 5, 0xFFFFFFFF8120006D)
    assert compile_format(KPROBE_FORMAT, symbols).decode(record, 1.0, 0, "cat").body == \
        "(vfs_read+0x0/0x1a0) count=5 caller=ksys_read+0x2d/0xc0"
    ret = struct.pack("<HBBiQQiQ", 2326, 0, 0, 7, 0xFFFFFFFF81100000, 0xFFFFFFFF81200050, -14, 0x10)
    assert compile_format(KRETPROBE_FORMAT, symbols).decode(ret, 1.0, 0, "cat").body == \
        "(ksys_read+0x10/0xc0 <- vfs_read) ret=-14 r2=0x10"


def test_a_table_whose_addresses_the_kernel_hides_is_refused(symbols, tmp_path):
    symbols.check()
    (tmp_path / "kallsyms").write_text(re.sub(r"^f+[0-9a-f]+", "0000000000000000", KALLSYMS, flags=re.M))
    with pytest.raises(UserError, match="shows no addresses"):
        symbols.check()


def test_a_symbol_argument_without_kallsyms_is_refused():
    with pytest.raises(UserError, match="as a kernel symbol"):
        compile_format(KPROBE_FORMAT)
