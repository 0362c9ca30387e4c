"""The three renderings of a probe, and kernel-valid unique names."""

from __future__ import annotations

import shlex

from kprobe_tui.probes.naming import name_fetch_args
from kprobe_tui.probes.rawfetch import compile_raw
from kprobe_tui.probes.render import bpftrace_oneliner, default_event_name, perf_command, unique_name
from kprobe_tui.probes.spec import parse_arg, parse_spec


def test_kernel_entry_probe_in_all_three_forms():
    spec = parse_spec(["tcp_sendmsg", "size=%dx:u64", "$comm"], group="kprobe_tui", filter="size > 100")
    probe = compile_raw(spec, "kprobe_tui")
    assert probe.definition() == "p:kprobe_tui/tcp_sendmsg tcp_sendmsg+0 size=%dx:u64 comm=$comm"
    assert probe.control_file == "kprobe_events"
    assert perf_command(spec, probe.group, probe.event) == (
        "perf probe -a 'kprobe_tui:tcp_sendmsg=tcp_sendmsg size=%dx:u64 $comm'"
    )
    assert bpftrace_oneliner(spec, [probe], exclude_pid=77) == (
        "bpftrace -e 'kprobe:tcp_sendmsg /(reg(\"dx\") > 100) && pid != 77/ "
        "{ printf(\"tcp_sendmsg size=%u comm=%s\\n\", reg(\"dx\"), comm); }'"
    )


def test_return_probe_and_argn_without_readme_support():
    spec = parse_spec(["vfs_read%return", "$retval:s64"])
    probe = compile_raw(spec, "g")
    assert probe.definition() == "r:g/vfs_read__return vfs_read+0 retval=$retval:s64"
    assert "kretprobe:vfs_read" in bpftrace_oneliner(spec, [probe])
    entry = compile_raw(parse_spec(["vfs_read", "$arg3"]), "g", arg_n_supported=False)
    assert entry.definition() == "p:g/vfs_read vfs_read+0 arg3=%dx"
    assert compile_raw(parse_spec(["vfs_read", "$arg3"]), "g", arg_n_supported=True).args[0].fetch == "$arg3"


def test_fprobe_definition_goes_to_dynamic_events():
    probe = compile_raw(parse_spec(["vfs_read%return", "$retval"], fprobe=True), "g")
    assert probe.definition() == "f:g/vfs_read__return vfs_read%return retval=$retval"
    assert probe.control_file == "dynamic_events"


def test_event_names_follow_perf_and_fit_kernel_limits():
    assert default_event_name(parse_spec(["foo.isra.0"])) == "foo_isra_0"
    assert default_event_name(parse_spec(["main:12"])) == "main_L12"
    assert default_event_name(parse_spec(["prog.c:12"])) == "prog_c_L12"
    assert default_event_name(parse_spec(["main+8"])) == "main_8"
    long = "f" * 70
    assert unique_name(long, [], 64) == "f" * 64
    assert unique_name(long, ["f" * 64], 64) == "f" * 62 + "_1"
    assert unique_name("ev", ["ev", "ev_1"], 64) == "ev_2"


def test_argument_names_are_unique_and_user_names_win():
    args = [parse_arg(t) for t in ("a->len", "b->len", "len=%di", "x[3]")]
    names = [f.name for f in name_fetch_args((a, *_default(a), None) for a in args)]
    assert names == ["len_1", "len_2", "len", "x_3"]


def _default(arg):
    from kprobe_tui.probes.render import default_arg_name

    return default_arg_name(arg), "%di"


def test_perf_command_for_uprobes_quotes_for_the_shell():
    spec = parse_spec(["main;x = *", "x"], binary="/opt/it's/prog")
    assert perf_command(spec) == "perf probe -x '/opt/it'\"'\"'s/prog' -a 'main;x=* x'"


def test_perf_command_gives_perf_the_probe_as_one_word():
    """perf reads -a's value as the whole probe and any word after the options as another: the probe and
    its arguments are one word, and perf's command line (perfprobe/args.py) reads back the same definition."""
    import shlex

    from kprobe_tui.perfprobe.args import parse

    spec = parse_spec(["do_sys_openat2", "filename=+0(%si):string", "flags:x"], group="probe")
    words = shlex.split(perf_command(spec, "probe", "open"))
    command = parse(words[2:])
    assert [d.words for d in command.definitions] == [("probe:open=do_sys_openat2", "filename=+0(%si):string", "flags:x")]


def test_bpftrace_reads_parameters_at_kernel_function_exit_through_fexit():
    spec = parse_spec(["do_sys_openat2%return", "fname=filename:ustring", "$retval"])
    line = bpftrace_oneliner(spec)
    assert "fexit:do_sys_openat2 " in line and "str(args.filename)" in line and "retval" in line
    assert "cannot read" not in line
    user = parse_spec(["work%return", "n", "$retval"], binary="/bin/true")
    assert bpftrace_oneliner(user).endswith("# bpftrace cannot read: n")  # uretprobes have no args


def _perf(words: list[str]):
    from dataclasses import replace

    return replace(parse_spec(words), dialect="perf")


def test_perf_dialect_names_events_as_perf_probe_does():
    """probe_trace_event__set_name / get_new_event_name: cut at the first '.' or '@', _L only for FUNC:LINE."""
    assert default_event_name(_perf(["foo.isra.0"])) == "foo"
    assert default_event_name(_perf(["main:12"])) == "main_L12"
    assert default_event_name(_perf(["main+8"])) == "main"
    assert default_event_name(_perf(["main;x = *"])) == "main"
    assert default_event_name(_perf(["tcp_recvmsg%return"])) == "tcp_recvmsg__return"
    assert default_event_name(_perf(["prog.c:12"]), function="work") == "work"
    assert default_event_name(_perf(["0x1129"])) == "abs_1129"
    assert default_event_name(_perf(["ev=main"])) == "ev"


def test_perf_dialect_names_and_types_arguments_as_perf_probe_does():
    """perf names a C variable by its spelling (``flags:x`` -> flags_x) or its last member; raw fetch-args are
    written unnamed (the kernel calls them argN), untyped $retval stays untyped."""
    spec = _perf(["do_sys_openat2%return", "$retval", "fd=%ax:s32", "+0(%si):string", "%di"])
    probe = compile_raw(spec, "probe")
    assert probe.definition() == "r:probe/do_sys_openat2__return do_sys_openat2+0 $retval fd=%ax:s32 +0(%si):string %di"
    assert [a.name for a in probe.args] == ["arg1", "fd", "arg3", "arg4"]
    typed = compile_raw(_perf(["do_sys_openat2%return", "$retval:x"]), "probe")
    assert typed.definition().endswith(" $retval:x64")  # a register is 64 bits wide
    args = [parse_arg(t) for t in ("flags:x", "sk->sk_state", "rec->scores[2]", "buf[1]")]
    names = [f.name for f in name_fetch_args(((a, *_default(a), None) for a in args), perf=True)]
    assert names == ["flags_x", "sk_state", "scores", "buf"]


def test_bpftrace_leaves_out_a_filters_test_of_a_value_it_cannot_read():
    """A local at a line: bpftrace has no name for it, and refuses a predicate that uses one; the rest of
    the filter (the feedback guard's pid) stays, and the comment says what was left out."""
    spec = parse_spec(["work:3", "total", "n"], binary="/bin/true", filter="(total > 1 && n < 5) && (common_pid != 77)")
    line = bpftrace_oneliner(spec)
    program = shlex.split(line, comments=True)[2]
    assert "/(pid != 77)/" in program and "total" not in program
    assert line.endswith("# bpftrace cannot read: total, n (the filter's (total > 1 && n < 5) left out)")
