"""perf probe's command line, filters, names and text as kprobe-tui probe reads and prints them (perfprobe/).

What perf does is taken from perf 6.1 (tools/perf/builtin-probe.c, util/strfilter.c, util/probe-event.c);
tests/live/test_perf_dropin.py runs /usr/bin/perf beside kprobe-tui for what a live kernel can show.
"""

from __future__ import annotations

import os

import pytest

from kprobe_tui.cli import main
from kprobe_tui.commands.probe import _default_group
from kprobe_tui.errors import UserError
from kprobe_tui.perfprobe import args as perfargs
from kprobe_tui.perfprobe.args import PerfError, PerfUsageError, parse
from kprobe_tui.perfprobe.strfilter import StrFilter
from kprobe_tui.perfprobe.text import Point, added, event_line, removed

# -- the command line ------------------------------------------------------------------------------


def test_a_probe_in_one_quoted_word_is_the_probe_in_several_words():
    """perf joins the words after the options and splits them on spaces: the lab's --add 'FUNC ARG' form."""
    one = parse(["--add", "do_sys_openat2 filename=+0(%si):string"])
    bare = parse(["do_sys_openat2", "filename=+0(%si):string"])
    quoted = parse(["do_sys_openat2 filename=+0(%si):string"])
    assert one.action == bare.action == quoted.action == "add"
    assert one.definitions[0].words == bare.definitions[0].words == quoted.definitions[0].words == (
        "do_sys_openat2", "filename=+0(%si):string")


def test_add_repeats_and_each_probe_takes_the_exec_given_before_it():
    command = parse(["-a", "tcp_recvmsg sk", "-x", "/bin/true", "-a", "main", "--add=work n"])
    assert [d.text for d in command.definitions] == ["tcp_recvmsg sk", "main", "work n"]
    assert [d.binary for d in command.definitions] == [None, os.path.realpath("/bin/true")] * 1 + [os.path.realpath("/bin/true")]


def test_a_first_word_naming_a_program_is_the_target():
    """perf probe /bin/bash readline: the program given as the first word, or a .ko as the module."""
    command = parse(["/bin/true", "main"])
    assert (command.definitions[0].binary, command.definitions[0].text) == (os.path.realpath("/bin/true"), "main")
    command = parse(["/lib/modules/x/9p.ko", "v9fs_read"])
    assert (command.definitions[0].module, command.definitions[0].binary) == ("/lib/modules/x/9p.ko", None)


def test_exec_after_the_last_probe_is_refused_with_einval():
    """perf: "-x/-m must follow the probe definitions" and -EINVAL (exit 234), not its usage status."""
    with pytest.raises(PerfError) as caught:
        parse(["-D", "main", "-x", "/bin/true"])
    assert caught.value.status == 234 and "must follow" in caught.value.message
    assert parse(["-x", "/bin/true", "-D", "main"]).definitions[0].binary == os.path.realpath("/bin/true")


@pytest.mark.parametrize("words", [["-a", "f", "-d", "g"], ["-l", "-L", "f"], ["-F", "-V", "f"], ["-D", "f", "-a", "g"]])
def test_actions_exclude_each_other_with_perfs_usage_status(words):
    with pytest.raises(PerfUsageError) as caught:
        parse(words)
    assert caught.value.status == 129


def test_list_and_funcs_take_a_filter_only_when_the_next_word_is_not_an_option():
    assert parse(["-l"]).filters == ["*"]
    assert parse(["-l", "probe_*:*"]).filters == ["probe_*:*"]
    assert parse(["-F"]).filters == ["!_* & !*@plt"]
    command = parse(["-F", "-x", "/bin/true"])
    assert command.filters == ["!_* & !*@plt"] and command.binary == os.path.realpath("/bin/true")
    assert parse(["-F", "tcp_*", "--filter", "udp_*"]).filters == ["tcp_*", "udp_*"]


def test_long_options_take_unique_prefixes_and_short_ones_cluster():
    command = parse(["--fu", "lab*", "--exe=/bin/true", "-nfq"])
    assert (command.action, command.filters, command.dry_run, command.force, command.quiet) == ("funcs", ["lab*"], True, True, True)
    assert parse(["-vv", "-amain"]).verbose == 2
    assert parse(["-amain"]).definitions[0].text == "main"
    with pytest.raises(PerfUsageError, match="ambiguous"):
        parse(["--d", "x"])  # --del, --definition, --dry-run, --debugfs
    with pytest.raises(PerfUsageError, match="unknown option"):
        parse(["--bogus"])
    with pytest.raises(PerfUsageError, match="requires a value"):
        parse(["-x"])
    with pytest.raises(PerfUsageError, match="numerical"):
        parse(["--max-probes", "x", "-F"])


def test_double_dash_ends_the_options():
    command = parse(["-x", "/bin/true", "--", "main", "n"])
    assert command.definitions[0].words == ("main", "n")


def test_quiet_and_verbose_are_exclusive_with_einval():
    with pytest.raises(PerfError) as caught:
        parse(["-q", "-v", "-l"])
    assert caught.value.status == 234


def test_definitions_from_options_are_marked_for_perfs_usage_status():
    """perf parses -a/-D/-V in the option's callback (bad syntax: usage, 129), bare words after the options (-EINVAL)."""
    assert parse(["-a", "f x"]).definitions[0].from_option
    assert not parse(["f", "x"]).definitions[0].from_option


def test_unsupported_perf_options_say_so():
    with pytest.raises(PerfUsageError, match="not supported"):
        parse(["--cache", "-F"])


# -- exit statuses through the command (no kernel needed) ---------------------------------------------


@pytest.mark.parametrize("words, status", [
    ([], 129),  # no action: perf's usage
    (["-a", "f", "-d", "g"], 129),
    (["-q", "-v", "-l"], 234),
    (["-a", "main:x"], 129),  # bad syntax in -a: usage
    (["-D", "main bad[arg"], 129),
    (["-V", "main a"], 129),  # '--vars' doesn't accept arguments
    (["-L", "main:x"], 129),
    (["-D", "main", "-x", "/bin/true"], 234),
    (["-h"], 0),
])
def test_exit_statuses_are_perfs(words, status, capsys):
    assert main(["probe", *words]) == status
    out, err = capsys.readouterr()
    if status == 129 and not words:
        assert "usage: kprobe-tui probe" in err
    elif status:
        assert err.startswith("kprobe-tui: ") and "internal error" not in err


def test_bare_words_with_bad_syntax_give_einval(capsys):
    assert main(["probe", "-x", "/bin/true", "main:x"]) == 234
    assert main(["probe", "-x", "/bin/true", "-D", "main n:u12"]) == 234  # a type the kernel does not know


# -- filters (-d, -l, -F, --filter) -------------------------------------------------------------------


@pytest.mark.parametrize("text, yes, no", [
    ("probe_*:*", ["probe_prog:work", "probe_:x"], ["probe:tcp_recvmsg", "kptui_1:x", "probe_prog"]),
    ("!_* & !*@plt", ["main", "tcp_recvmsg"], ["_start", "puts@plt"]),
    ("a*|b*&*c", ["abc", "ax", "bc"], ["bx", "cc"]),  # & binds tighter than |, as in perf
    ("!(a*|b*)", ["cat"], ["apple", "bee"]),
    ("tcp_[!r]*", ["tcp_sendmsg"], ["tcp_recvmsg"]),
    ("lab_open_?", ["lab_open_1"], ["lab_open__return", "lab_open"]),
    ("x\\*", ["x*"], ["xy"]),
])
def test_filters_match_as_perfs_strfilter(text, yes, no):
    chosen = StrFilter(text)
    assert [chosen.matches(name) for name in yes] == [True] * len(yes)
    assert [chosen.matches(name) for name in no] == [False] * len(no)


def test_a_second_filter_is_an_alternative():
    chosen = StrFilter("tcp_*").or_("udp_*")
    assert chosen.matches("udp_sendmsg") and chosen.matches("tcp_close") and not chosen.matches("ip_rcv")


@pytest.mark.parametrize("text, column", [("a &", 4), ("(a", 3), ("& a", 1), ("a b", 3)])
def test_a_bad_filter_is_refused_with_a_caret_under_its_column(text, column):
    with pytest.raises(UserError) as caught:
        StrFilter(text)
    first, caret = caught.value.message.splitlines()
    assert first.startswith(f"filter parse error at {column}:")
    assert caret.index("^") == len("  ") + column


# -- names and text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("binary, group", [(None, "probe"), ("/tmp/x/perflab", "probe_perflab"),
                                           ("/lib/x86_64-linux-gnu/libc.so.6", "probe_libc"), ("/opt/my-app", "probe_my")])
def test_groups_are_perfs(binary, group):
    """perf's default group, probe_<program> for -x cut at the program's first non-name character."""
    assert _default_group(binary) == group


@pytest.mark.parametrize("point, text", [
    (Point("tcp_recvmsg"), "tcp_recvmsg"),
    (Point("tcp_recvmsg", offset=16), "tcp_recvmsg+16"),
    (Point("work", line=3, file="/src/prog.c"), "work:3@/src/prog.c"),
    (Point("lab_open", is_return=True, file="/src/prog.c"), "lab_open%return@/src/prog.c"),
    (Point("tcp_recvmsg", file="/build/linux-6.1/net/ipv4/tcp_input_long_name.c"), "tcp_recvmsg@ipv4/tcp_input_long_name.c"),  # strchr from the cut
    (Point(None, line=12, file="/src/prog.c"), "@/src/prog.c:12"),
])
def test_points_are_written_as_perf_writes_them(point, text):
    """synthesize_perf_probe_point, a file cut to its last 30 characters at a '/'."""
    assert point.text() == text


def test_event_lines_and_added_text_are_perfs_byte_for_byte():
    line = event_line("probe_perflab", "lab_open__return", "lab_open%return", "/tmp/perflab", ["$retval"])
    assert line == "  probe_perflab:lab_open__return (on lab_open%return in /tmp/perflab with $retval)"
    assert event_line("probe", "f", "f", None, []) == "  probe:f              (on f)"
    assert added([line], ("probe_perflab", "lab_open__return")) == (
        "Added new event:\n" + line + "\n\nYou can now use it in all perf tools, such as:\n\n"
        "\tperf record -e probe_perflab:lab_open__return -aR sleep 1\n\n")
    assert added(["  a", "  b"], ("probe", "b")).startswith("Added new events:\n  a\n  b\n\n")
    assert removed("probe", "tcp_recvmsg") == "Removed event: probe:tcp_recvmsg\n"


def test_usage_lists_every_perf_option():
    text = perfargs.usage()
    for option in perfargs.OPTIONS:
        assert f"--{option.long}" in text


def test_our_record_of_a_probe_matches_the_kernels_line_for_unnamed_fetch_args():
    """perf's dialect writes raw fetch-args unnamed (``%di``, ``$retval``); the kernel shows them back as
    argN=...: the record of what we made must compare equal, or list and del would not know it as ours."""
    from kprobe_tui.kernel.registry import normal

    written = "r:probe_prog/work__return /tmp/prog:0x1149 $retval +0(%di):string"
    shown = "r:probe_prog/work__return /tmp/prog:0x0000000000001149 arg1=$retval arg2=+0(%di):string"
    assert normal(written) == normal(shown)
    assert normal("p:g/e /p:0x10 n=%di a=%si") == "p:g/e /p:0x10 n=%di a=%si"


def _read_as_main_does(argv: list[str]):
    from kprobe_tui.cli import build_parser, command_index
    from kprobe_tui.commands import probe

    parser = build_parser()
    at = command_index(parser, argv)
    args = parser.parse_args(argv[:at])
    args.command, args.words = argv[at], argv[at + 1 :]
    probe.prepare(args)
    return args.perf


@pytest.mark.parametrize("argv", [
    ["-k", "/vm", "-s", "/src", "--kallsyms", "/ks", "probe", "-D", "tcp_recvmsg sk"],
    ["probe", "-k", "/vm", "-s", "/src", "--kallsyms", "/ks", "-D", "tcp_recvmsg sk"],
    ["-k", "/vm", "probe", "--source=/src", "--kall", "/ks", "-D", "tcp_recvmsg sk"],
])
def test_target_and_offline_options_mean_the_same_before_or_after_probe(argv):
    """One grammar: -k/-s/-m/-x and the offline options before the command's name count as given first."""
    command = _read_as_main_does(argv)
    assert (command.vmlinux, command.source, command.offline) == ("/vm", "/src", {"kallsyms": "/ks"})
    assert command.definitions[0].words == ("tcp_recvmsg", "sk")


def test_exec_and_module_before_probe_apply_to_its_probes():
    assert _read_as_main_does(["-x", "/bin/true", "probe", "main"]).definitions[0].binary == os.path.realpath("/bin/true")
    assert _read_as_main_does(["-m", "9p", "probe", "v9fs_read"]).definitions[0].module == "9p"
    # one given after probe's name still applies to the probes after it only, as perf's -x
    command = _read_as_main_does(["-x", "/bin/true", "probe", "-a", "main", "-m", "9p", "-a", "v9fs_read"])
    assert [(d.binary, d.module) for d in command.definitions] == [(os.path.realpath("/bin/true"), None), (None, "9p")]
