"""Probe specs and perf's command line: any words give a spec (a command) or a UserError."""

from __future__ import annotations

from contextlib import suppress

from hypothesis import example, given
from hypothesis import strategies as st

from kprobe_tui.errors import UserError
from kprobe_tui.perfprobe import args as perfargs
from kprobe_tui.perfprobe.strfilter import StrFilter
from kprobe_tui.probes.spec import parse_arg, parse_spec
from tests.property.mutation import examples, mutated_text, text_inputs

SPECS = [
    "tcp_recvmsg sk flags:x", "work%return $retval", "lab_recv:4 len", "p:grp/ev /bin/true:0x1 a=%di:s32",
    "grp:ev=do_sys_openat2 dfd filename:string flags:x32", "vfs_read+16 %di +8(+0(%si)):u64 @jiffies",
    "fs/open.c:1200 $vars", "do_sys_open@fs/open.c:3 mode", "main;count++ x->next.len[3]:u8[16]",
    "0xffffffff81000000%return $retval:s64", "f b=\\\"str\\\":string c=\\42 $stack2 $arg1 $comm $params",
    "ev=tcp_v4_connect sk->__sk_common.skc_dport:b3@1/32 -4(%bp):s32",
]
SPEC_TOKENS = ("%return", "$retval", "$params", "$vars", "$arg", "$stack", "$comm", "%di", "%rax", "+8(", "->", ".",
               "[3]", ":u32", ":x", ":string", ":b3@1/32", ":u8[65]", "@", ";", "=", "grp:", "kptui_1:", "0x1")
ARGS = [arg for spec in SPECS for arg in spec.split()[1:]]


@examples(400)
@given(mutated_text(SPECS, SPEC_TOKENS))
@example('"tcp_recvmsg sk flags:x')  # shlex's ValueError, once
def test_a_spec_as_one_string_parses_or_is_refused(text):
    with suppress(UserError):
        parse_spec(text)


@examples(300)
@given(st.lists(text_inputs(ARGS + [s.split()[0] for s in SPECS], SPEC_TOKENS), min_size=1, max_size=6),
       st.booleans(), st.sampled_from([None, "kprobe_tui", "g", "kptui_12"]))
def test_spec_words_parse_or_are_refused(words, fprobe, group):
    with suppress(UserError):
        parse_spec(words, fprobe=fprobe, group=group)


@examples(300)
@given(text_inputs(ARGS, SPEC_TOKENS))
def test_an_argument_parses_or_is_refused(text):
    with suppress(UserError):
        parse_arg(text)


PERF_COMMANDS = [
    "-a tcp_recvmsg sk", "-x /bin/true main argc", "-m ext4 -a ext4_sync_file", "--add=vfs_read count -n -v",
    "-d probe:*", "-l", "-l 'probe*'", "-F !_* & !*@plt -x /bin/true", "-L vfs_read:3+5", "-V vfs_read --externs",
    "--max-probes 5 -q do_sys_open", "/bin/true main", "-g grp --event-filter 'len > 3' --json --yes f", "-D f%return $retval",
    "--fprobe --explain f", "-nvf -- f", "--snapshot snap.tgz --kallsyms k -a f", "--funcs --filter 'a*|b*'",
]
PERF_TOKENS = ("-a", "-d", "-l", "-D", "-L", "-V", "-F", "-x", "-m", "-k", "-s", "-f", "-n", "-q", "-v", "-g", "-y",
               "--", "-", "--add", "--del=", "--list", "--max-probes", "--filter", "--ex", "--cache", "--e", "=")


def _argv(draw_text: str) -> list[str]:
    # argv words never hold NUL (they are C strings)
    return draw_text.replace("\x00", "").split(" ")


@examples(400)
@given(mutated_text(PERF_COMMANDS, PERF_TOKENS).map(_argv))
def test_perf_command_lines_parse_or_are_refused_and_their_probes_too(words):
    try:
        command = perfargs.parse(words)
    except UserError:
        return
    for definition in command.definitions:
        with suppress(UserError):
            parse_spec(list(definition.words), binary=definition.binary, module=definition.module)
    for text in command.filters:
        with suppress(UserError):
            StrFilter(text).matches("tcp_recvmsg")


FILTERS = ["!_* & !*@plt", "!__k???tab_* & !__crc_*", "*", "(vfs_*|tcp_*) & !*_rcu", "[a-c]*", "[!x]?z", "a\\*b"]


@examples(300)
@given(text_inputs(FILTERS, ("!", "&", "|", "(", ")", "[", "[!", "]", "*", "?", "\\", "[z-a]")),
       st.sampled_from(["tcp_recvmsg", "", "_x", "a*b", "vfs_read@plt", "a" * 200]))
# found before: re.error, RecursionError (three ways), minutes of backtracking
@example(text="[z-a]!_* & !*@plt", name="tcp_recvmsg")
@example(text="!" * 1000 + "a", name="a")
@example(text="(" * 400 + "a" + ")" * 400, name="a")
@example(text="a&" * 2000 + "a", name="a")
@example(text="*a" * 30 + "b", name="a" * 200)
def test_perf_filters_parse_and_match_or_are_refused(text, name):
    with suppress(UserError):
        StrFilter(text).matches(name)
