"""Finding debug info (file, debuglink, build-id, kernel paths), the index cache, and CLI errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from debuginfo_helpers import perf_probe

from kprobe_tui.debuginfo import locate
from kprobe_tui.debuginfo.index import cache_dir
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import open_debuginfo
from kprobe_tui.errors import UserError


def cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, env=env)


@pytest.fixture
def split_program(programs, tmp_path) -> tuple[Path, Path]:
    """A stripped copy of the -O2 program and its debug file, linked by .gnu_debuglink."""
    binary = tmp_path / "prog"
    debug = tmp_path / "prog.debug"
    shutil.copy(programs[("O2", 5)], binary)
    subprocess.run(["objcopy", "--only-keep-debug", str(binary), str(debug)], check=True)
    subprocess.run(["strip", "--strip-debug", str(binary)], check=True)
    subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(binary)], cwd=tmp_path, check=True)
    return binary, debug


def test_debug_info_in_the_file_itself(programs):
    found = locate.find_binary_debuginfo(str(programs[("O0", 4)]))
    assert found.debug_file == found.binary and len(found.build_id) == 40


def test_debuglink_beside_and_in_dot_debug(split_program):
    binary, debug = split_program
    assert locate.find_binary_debuginfo(str(binary)).debug_file == debug
    (binary.parent / ".debug").mkdir()
    moved = debug.rename(binary.parent / ".debug" / debug.name)
    assert locate.find_binary_debuginfo(str(binary)).debug_file == moved


def test_build_id_directory(split_program, tmp_path, monkeypatch):
    binary, debug = split_program
    build_id = locate.find_binary_debuginfo(str(binary)).build_id
    root = tmp_path / "usr-lib-debug"
    target = root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    target.parent.mkdir(parents=True)
    debug.rename(target)
    monkeypatch.setattr(locate, "DEBUG_ROOT", root)
    found = locate.find_binary_debuginfo(str(binary))
    assert found.debug_file == target and found.binary == binary.resolve()
    # the probe points are computed on the debug file and converted with the stripped binary's segments
    point = open_debuginfo(binary=str(binary)).probe_points("count_ready")[0]
    assert point.file_offset is not None and point.offset == 0


def test_no_debug_info_says_what_to_install(split_program):
    binary, debug = split_program
    debug.unlink()
    with pytest.raises(UserError) as error:
        locate.find_binary_debuginfo(str(binary))
    assert "no DWARF debug info" in error.value.message and "dbgsym" in error.value.hint


def test_kernel_not_found_names_the_packages(monkeypatch, tmp_path):
    monkeypatch.setattr(locate, "DEBUG_ROOT", tmp_path)
    with pytest.raises(UserError) as error:
        locate.find_vmlinux(release="0.0.0-none")
    assert "linux-image-0.0.0-none-dbg" in error.value.hint and "dbgsym" in error.value.hint
    assert "kernel-debuginfo" in error.value.hint and "BTF" in error.value.hint


def test_kernel_build_id_mismatch_is_refused(monkeypatch, tmp_path, programs):
    """Any ELF with DWARF stands in for a vmlinux of another build: its build-id cannot match."""
    monkeypatch.setattr(locate, "DEBUG_ROOT", tmp_path)
    monkeypatch.setattr(locate, "running_kernel_build_id", lambda: "00" * 20)
    (tmp_path / "boot").mkdir()
    shutil.copy(programs[("O0", 5)], tmp_path / "boot" / "vmlinux-9.9.9-test")
    with pytest.raises(UserError) as error:
        locate.find_vmlinux(release="9.9.9-test")
    assert "built for another kernel" in error.value.message


def test_source_prefix_strips_leading_directories_like_perf(perf, programs, tmp_path):
    """-s DIR: perf tries DIR/<path>, then drops leading directories; we print the same path."""
    binary = programs[("O2", 5)]
    copy = tmp_path / "src" / "c"
    shutil.copytree(Path(__file__).parent / "c", copy)
    expected = perf_probe("-x", str(binary), "-s", str(tmp_path / "src"), "-L", "count_ready")
    assert expected.returncode == 0
    info = open_debuginfo(binary=str(binary), source_dir=str(tmp_path / "src"))
    text, _ = render(info, find_line_range(info, LineSpec.parse("count_ready")))
    assert text == expected.stdout
    assert text.splitlines()[0] == f"<count_ready@{tmp_path}/src//c/probed.c:0>"  # perf's double slash


def test_missing_source_lists_numbers_and_says_so(programs, tmp_path):
    info = open_debuginfo(binary=str(programs[("O0", 5)]), source_dir=str(tmp_path))
    text, note = render(info, find_line_range(info, LineSpec.parse("count_ready")))
    assert text.splitlines()[1].strip() == "0" and "source text not found" in note


def test_index_is_saved_per_build_id_and_reused(programs, monkeypatch):
    binary = str(programs[("O2", 4)])
    info = open_debuginfo(binary=binary)
    info.definitions("count_ready")
    saved = cache_dir() / f"{info.located.build_id}.index.sqlite"
    assert saved.exists()
    reopened = open_debuginfo(binary=binary)
    monkeypatch.setattr(type(reopened), "_scan", lambda self, name: pytest.fail("index rebuilt"))
    monkeypatch.setattr(type(reopened.units.of(reopened.cu(info.index.cus("count_ready")[0]))), "functions",
                        property(lambda self: pytest.fail("unit walked again")))
    assert [d.offset for d in reopened.definitions("count_ready")] == [d.offset for d in info.definitions("count_ready")]


def test_inline_only_name_is_found_by_a_scan_of_the_units_once(programs, monkeypatch):
    """shape_area exists only inlined at -O2: no symbol names it, the units that name it are found once."""
    info = open_debuginfo(binary=str(programs[("O2", 5)]))
    assert not info.index.cus("shape_area") and not info.index.scanned("shape_area")
    assert info.definitions("shape_area")
    assert info.index.scanned("shape_area") and info.index.cus("shape_area")
    reopened = open_debuginfo(binary=str(programs[("O2", 5)]))
    import kprobe_tui.debuginfo.namescan as namescan

    monkeypatch.setattr(namescan, "units_naming", lambda *a: pytest.fail("scanned again"))
    assert [d.offset for d in reopened.definitions("shape_area")] == [d.offset for d in info.definitions("shape_area")]


@pytest.mark.parametrize(
    "args, words",
    [
        (["lines", "-x", "/nonexistent/prog", "main"], ["/nonexistent/prog", "no such file"]),
        (["vars", "-x", "{prog}", "count_ready:x"], ["count_ready:x", "FUNC:LINE"]),
        (["vars", "-x", "{prog}", "no_such_function"], ["no_such_function", "not found"]),
        (["lines", "-x", "{prog}", "main:9-3"], ["main:9-3", "before it starts"]),
        (["lines", "-x", "/etc/hostname", "main"], ["/etc/hostname", "not an ELF"]),
    ],
)
def test_cli_errors_are_clear_and_without_traceback(programs, args, words):
    result = cli(*(a.format(prog=programs[("O0", 5)]) for a in args))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


def test_cli_vars_verbose_explains_locations(programs):
    result = cli("vars", "-x", str(programs[("O2", 5)]), "count_ready:8", "--verbose")
    assert result.returncode == 0, result.stderr
    assert "register %" in result.stdout and "[not capturable]" in result.stdout
    assert "DW_OP_entry_value" in result.stdout


def test_line_ranges_are_answered_from_the_index_the_second_time(programs, monkeypatch):
    from kprobe_tui.debuginfo import lines

    binary = str(programs[("O2", 5)])
    first = find_line_range(open_debuginfo(binary=binary), LineSpec.parse("total_area:2-9"))
    monkeypatch.setattr(lines, "_find_line_range", lambda *a: pytest.fail("walked the line table again"))
    again = open_debuginfo(binary=binary)
    second = find_line_range(again, LineSpec.parse("total_area:2-9"))
    assert (second.path, second.offset, second.lines) == (first.path, first.offset, first.lines)
    assert render(again, second) == render(open_debuginfo(binary=binary), first)


def test_vars_listing_is_answered_from_the_index_the_second_time(programs, perf):
    """A repeated `vars` prints perf's listing without parsing DWARF: pyelftools is not even imported."""
    binary = str(programs[("O2", 5)])
    expected = perf_probe("-x", binary, "-V", "count_ready").stdout
    probe = ("import sys; from kprobe_tui.cli import main; code = main(sys.argv[1:]); "
             "sys.stderr.write(repr(sorted(m for m in sys.modules if m.startswith('elftools'))[:1]))")
    runs = [subprocess.run([sys.executable, "-c", probe, "vars", "-x", binary, "count_ready"],
                           capture_output=True, text=True, check=True) for _ in range(2)]
    assert [run.stdout for run in runs] == [expected, expected]
    assert [run.stderr for run in runs] == ["['elftools']", "[]"]


def test_warm_lines_import_neither_pyelftools_nor_other_commands(programs, tmp_path):
    """Start-up is most of a warm query: a command loads only its own module and what it uses."""
    binary = str(programs[("O2", 5)])
    loaded = ("import sys; from kprobe_tui.cli import main; main(sys.argv[1:]); "
              "print(sorted(m for m in sys.modules if m.startswith(('elftools', 'textual', 'psutil', "
              "'kprobe_tui.kernel', 'kprobe_tui.probes', 'kprobe_tui.stream', 'kprobe_tui.commands.'))))")
    runs = [subprocess.run([sys.executable, "-c", loaded, "lines", "-x", binary, "count_ready"],
                           capture_output=True, text=True, cwd=tmp_path, check=True) for _ in range(2)]
    cold, warm = (run.stdout.splitlines()[-1] for run in runs)
    assert "'elftools.elf.elffile'" in cold
    assert warm == "['kprobe_tui.commands.lines']"


def test_help_lists_every_command_and_each_command_has_its_own():
    from kprobe_tui.cli import COMMAND_NAMES, COMMANDS

    listing = cli("--help")
    assert listing.returncode == 0
    for module in COMMANDS:
        name = COMMAND_NAMES.get(module, module)
        assert f"\n    {name} " in listing.stdout, name
        own = cli(name, "--help")
        assert own.returncode == 0 and own.stdout.startswith(f"usage: kprobe-tui {name} "), name
    wrong = cli("nonesuch")
    assert wrong.returncode == 2 and "invalid choice: 'nonesuch'" in wrong.stderr
