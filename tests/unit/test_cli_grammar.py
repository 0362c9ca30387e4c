"""One grammar for every command: -x/-k/-m/-s and the offline options before or after the command's name,
the same meaning everywhere, and a clear refusal where an option means nothing (issue 12 item 2)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.cli import build_parser, check_targets, main
from kprobe_tui.probes.binary import BinaryCatalog

PROJECT = Path(__file__).resolve().parents[2]
COMMON = {"binary": ["-x", "/bin/true"], "vmlinux": ["-k", "/vmlinux"], "module": ["-m", "9p"], "source_dir": ["-s", "/src"],
          "snapshot": ["--snapshot", "/snap.tar.gz"], "kallsyms": ["--kallsyms", "/ks"], "btf": ["--btf", "/btf"]}
COMMAND_WORDS = {"funcs": ["tcp_*"], "count": ["vfs_*"], "hist": ["vfs_read", "count"], "latency": ["vfs_read"],
                 "lines": ["main"], "vars": ["main"], "list": [], "del": ["x*"], "tail": [],
                 "doctor": [], "snapshot": ["out.tar.gz"], "cleanup": []}


def cli(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *words], cwd=PROJECT, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    out = tmp_path_factory.mktemp("grammar")
    (out / "prog.c").write_text("static int helper(int x) { return x * 2; }\n"
                                "int work(int n) { return helper(n) + 1; }\n"
                                "int main(int argc, char **argv) { return work(argc) > 10; }\n")
    subprocess.run(["gcc", "-O0", "-g", "-o", str(out / "prog"), str(out / "prog.c")], check=True)
    return out / "prog"


@pytest.mark.parametrize("command", sorted(COMMAND_WORDS))
@pytest.mark.parametrize("option", sorted(COMMON))
def test_an_option_means_the_same_before_and_after_the_command(command, option):
    words = COMMON[option]
    before = build_parser().parse_args([*words, command, *COMMAND_WORDS[command]])
    after = build_parser().parse_args([command, *words, *COMMAND_WORDS[command]])
    assert getattr(before, option) == getattr(after, option) == words[1]
    assert vars(before) == vars(after)


def test_a_value_after_the_command_wins_over_one_before():
    args = build_parser().parse_args(["-x", "/bin/true", "funcs", "-x", "/bin/false"])
    assert args.binary == "/bin/false"


def test_options_not_given_after_the_command_leave_those_given_before_alone():
    args = build_parser().parse_args(["-x", "/bin/true", "--kallsyms", "/ks", "funcs", "-m", "9p"])
    assert (args.binary, args.kallsyms, args.module) == ("/bin/true", "/ks", "9p")


def test_two_targets_and_meaningless_options_are_refused_with_what_to_do(capsys):
    assert main(["-x", "/bin/true", "lines", "-k", "/vmlinux", "main"]) == 2
    assert "-x and -k name two targets" in capsys.readouterr().err
    assert main(["-x", "/bin/true", "snapshot", "out.tar.gz"]) == 2
    err = capsys.readouterr().err
    assert "-x has no meaning for snapshot" in err and "snapshot takes none of -x/-k/-m/-s" in err
    assert main(["cleanup", "-m", "9p"]) == 2
    assert "-m has no meaning for cleanup" in capsys.readouterr().err


def test_every_command_says_which_options_it_takes():
    for command in COMMAND_WORDS:
        args = build_parser().parse_args([command, *COMMAND_WORDS[command]])
        module = sys.modules[args.run.__module__]
        check_targets(args, getattr(module, "OPTIONS", frozenset()), command)  # nothing given: always fine


def test_funcs_on_a_binary_lists_its_functions_not_the_kernels(prog):
    """`kprobe-tui -x ./prog funcs` (the builder suggests it) lists the program's functions, as the TUI's -x browser."""
    before, after = cli("-x", str(prog), "funcs"), cli("funcs", "-x", str(prog))
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout
    names = before.stdout.split()
    assert {"work", "main", "helper"} <= set(names) and not {"vfs_read", "tcp_recvmsg"} & set(names)
    catalog = BinaryCatalog(prog)
    listed = cli("funcs", "--all", "-x", str(prog)).stdout.splitlines()
    assert listed, "funcs --all -x listed nothing"
    for line in listed:
        name, label, reason = line.split("\t")
        status, why = catalog.classify(name)
        assert (label, reason) == (catalog.labels[status], why)
    assert cli("funcs", "-x", str(prog), "wor").stdout == "work\n"


def test_list_and_doctor_take_a_binary(prog):
    assert cli("list", "-x", str(prog)).returncode == 0
    report = cli("-x", str(prog), "doctor")
    assert report.returncode == 0 and f"-x {prog}: probeable with uprobes; variables by name: debug info in the file itself" in report.stdout
