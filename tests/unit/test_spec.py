"""perf-probe syntax: what parses into what, and what is refused with the offending token."""

from __future__ import annotations

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.probes.spec import AccessStep, check_type, parse_arg, parse_spec, sized


def test_full_perf_syntax_with_group_event_and_member_paths():
    spec = parse_spec("net:rx=tcp_recvmsg sk->__sk_common.skc_state len:u32 first=buf[2]")
    assert (spec.kind, spec.function, spec.group, spec.event) == ("entry", "tcp_recvmsg", "net", "rx")
    state, length, first = spec.args
    assert state.var == "sk" and state.path == (AccessStep("->", "__sk_common"), AccessStep(".", "skc_state"))
    assert (length.var, length.type) == ("len", "u32")
    assert (first.name, first.var, first.path) == ("first", "buf", (AccessStep("[]", index=2),))


@pytest.mark.parametrize(
    "text, kind, fields",
    [
        ("main", "entry", {"function": "main"}),
        ("main%return", "return", {"function": "main"}),
        ("main:3", "line", {"function": "main", "line": 3}),
        ("main@prog.c:3", "line", {"function": "main", "source": "prog.c", "line": 3}),
        ("prog.c:42", "line", {"function": None, "source": "prog.c", "line": 42}),
        ("src/x/prog.c;count++", "line", {"source": "src/x/prog.c", "lazy": "count++"}),
        ("main+0x10", "offset", {"function": "main", "offset": 16}),
        ("main;x = *", "line", {"function": "main", "lazy": "x = *"}),
        ("0x401000", "offset", {"address": 0x401000}),
        ("foo.isra.0", "entry", {"function": "foo.isra.0"}),
    ],
)
def test_places(text, kind, fields):
    spec = parse_spec([text])
    assert spec.kind == kind
    for name, value in fields.items():
        assert getattr(spec, name) == value
    assert spec.place_text() == text.replace("0x10", "16") or spec.address is not None


@pytest.mark.parametrize(
    "text, kind, extra",
    [
        ("$retval", "retval", {}),
        ("$params", "params", {}),
        ("$vars", "vars", {}),
        ("$comm", "comm", {}),
        ("$arg3", "argN", {"index": 3}),
        ("%rdi", "reg", {"var": "di"}),
        ("%r8", "reg", {"var": "r8"}),
        ("%eax", "reg", {"var": "ax"}),
        ("@jiffies", "symbol", {"var": "jiffies"}),
        ("@counter+8", "symbol", {"var": "counter", "index": 8}),
        ("+8(%di)", "raw", {}),
        ("+0(+8(%si)):string", "raw", {"type": "string"}),
        ("p->a.b[3]", "var", {"var": "p"}),
    ],
)
def test_argument_kinds(text, kind, extra):
    arg = parse_arg(text)
    assert arg.kind == kind
    for name, value in extra.items():
        assert getattr(arg, name) == value


@pytest.mark.parametrize("type_", ["u8", "s64", "x32", "string", "ustring", "symbol", "char", "b3@5/32", "u8[16]", "%pd",
                                   "x", "u", "s"])
def test_kernel_types_accepted(type_):
    assert check_type(type_) == type_


@pytest.mark.parametrize("wanted, natural, result", [
    ("x", "s32", "x32"), ("u", "x64", "u64"), ("s", "u8", "s8"), ("x", "u16[4]", "x16[4]"),
    ("x", None, "x64"),  # a register or raw memory: 64 bits
    ("x", "b3@1/32", "b3@1/32"),  # a bitfield keeps its bits, as in perf
    ("u32", "s8", "u32"),  # a type with its width is kept
])
def test_a_bare_type_takes_the_width_of_the_value(wanted, natural, result):
    """perf's `flags:x` (the lab's `tcp_recvmsg sk flags:x`): x, u and s with no width take it from the debug info."""
    assert sized(wanted, natural) == result


def test_perf_lab_arguments_parse_with_bare_types():
    spec = parse_spec(["tcp_recvmsg_sk_flags=tcp_recvmsg", "sk", "flags:x"])
    assert spec.event == "tcp_recvmsg_sk_flags" and [(a.var, a.type) for a in spec.args] == [("sk", None), ("flags", "x")]


@pytest.mark.parametrize(
    "words, token",
    [
        (["f", "x:u7"], "u7"),
        (["f", "x:b30@5/32"], "b30@5/32"),
        (["f", "x:u8[0]"], "u8[0]"),
        (["f", "%xyz"], "%xyz"),
        (["f", "$foo"], "$foo"),
        (["f", "$arg0"], "$arg0"),
        (["f", "a-b"], "a-b"),
        (["f", "9name=%di"], "9name"),
        (["f", "n" * 33 + "=%di"], "n" * 33),
        (["e" * 65 + "=f"], "e" * 65),
        (["1grp:ev=f"], "1grp"),
        (["f", "$retval"], "$retval"),
        (["f%return", "$vars"], "$vars"),
        (["f:3+4"], "f:3+4"),
        (["f%return;x"], "f%return;x"),
        (["prog.c"], "prog.c"),
        (["f?"], "f?"),
    ],
)
def test_bad_input_names_the_offending_token(words, token):
    with pytest.raises(UserError) as refused:
        parse_spec(words)
    assert token in str(refused.value)


def test_arg_count_limit():
    parse_spec(["f", *["%di"] * 128])
    with pytest.raises(UserError, match="at most 128"):
        parse_spec(["f", *["%di"] * 129])


def test_fprobe_only_on_kernel_entry_or_exit():
    spec = parse_spec(["vfs_read%return", "$retval"], fprobe=True)
    assert spec.kind == "fprobe" and spec.is_return and spec.place_text() == "vfs_read%return"
    with pytest.raises(UserError, match="fprobes"):
        parse_spec(["vfs_read:3"], fprobe=True)


def test_return_probes_take_parameters_and_leave_locals_to_the_compiler():
    """Kernels that save entry arguments let a return probe read parameters; which names are locals only DWARF knows."""
    spec = parse_spec(["do_sys_openat2%return", "fname=filename:ustring", "$params", "how->flags", "$retval"])
    assert spec.is_return and [a.kind for a in spec.args] == ["var", "params", "var", "retval"]
    with pytest.raises(UserError, match="local variables are gone when the function returns") as refused:
        parse_spec(["f%return", "$vars"])
    assert "$params" in refused.value.hint
