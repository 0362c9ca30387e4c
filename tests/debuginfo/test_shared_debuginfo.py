"""One DebugInfo per file, answering one question at a time whichever thread asks.

pyelftools reads through shared stream positions: two threads reading one file at once get each
other's bytes (without the lock, 4 threads asking -V questions of probed.c went wrong in 18 of 40
rounds: "corrupt" DWARF, functions not found, a SystemError). The TUI asks from several workers at
once (source view, builder preview, variable tree, the function list's warm-up), so DebugInfo holds
its own lock, and every caller of a file shares the same one.
"""

from __future__ import annotations

import shutil
import subprocess
import threading

from debuginfo_helpers import C_DIR, LINE_SPECS, VAR_SPECS

from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range
from kprobe_tui.debuginfo.locate import find_binary_debuginfo
from kprobe_tui.debuginfo.scope import DebugInfo, PointSpec, open_debuginfo
from kprobe_tui.errors import UserError
from kprobe_tui.probes.binary import BinaryCatalog
from kprobe_tui.probes.capture import children, dwarf_variables
from kprobe_tui.probes.dwarffetch import dwarf_points
from kprobe_tui.probes.spec import parse_spec

ROUNDS = 12  # without the lock, P(every round right) ~ (22/40)^12 < 0.001
THREADS = 4


def answers(info: DebugInfo, order: list[str]) -> dict[str, str]:
    """-V of every VAR_SPEC and -L of every LINE_SPEC, in the given order (errors as answers too)."""
    found = {}
    for spec in order:
        kind, text = spec.split(" ", 1)
        try:
            if kind == "V":
                parsed = PointSpec.parse(text)
                found[spec] = format_points(parsed, info.probe_points(parsed), verbose=True)
            else:
                found[spec] = repr(find_line_range(info, LineSpec.parse(text)).lines)
        except (UserError, Exception) as exc:  # noqa: BLE001  (a wrong answer, whatever form it takes)
            found[spec] = f"{type(exc).__name__}: {exc}"
    return found


def ask(info: DebugInfo, specs: list[str], index: int, results: list[dict[str, str]]) -> None:
    """One thread's questions, in an order of its own (``index``), answered into ``results[index]``."""
    order = specs[index:] + specs[:index] if index % 2 else specs[::-1]
    results[index] = answers(info, order)


def test_questions_asked_from_several_threads_get_the_answers_asked_from_one(programs, tmp_path, monkeypatch):
    binary = programs[("O2", 5)]
    located = find_binary_debuginfo(str(binary), None)
    specs = [f"V {spec}" for spec in VAR_SPECS] + [f"L {spec}" for spec in LINE_SPECS]
    alone = answers(DebugInfo(located), specs)
    for round_ in range(ROUNDS):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cache{round_}"))  # nothing answered from an index
        info = DebugInfo(located)  # cold: every answer is read from the file
        results: list[dict[str, str]] = [{} for _ in range(THREADS)]
        threads = [threading.Thread(target=ask, args=(info, specs, index, results)) for index in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            assert result == alone


def test_every_caller_of_a_file_shares_one_debuginfo(programs, tmp_path):
    """-x mode: the function list, the probe compiler, the variable tree and the source view open
    the same file; they get one DebugInfo (one parse, one lock) instead of one each."""
    binary = tmp_path / "prog"
    shutil.copy(programs[("O0", 5)], binary)
    info = open_debuginfo(binary=str(binary))
    assert open_debuginfo(binary=str(binary)) is info
    assert BinaryCatalog(str(binary))._debuginfo is info  # noqa: SLF001  (what the list classifies with)
    spec = parse_spec(["total_area", "$params"], binary=str(binary), group="g")
    assert dwarf_points(spec)[0] is info  # what the builder compiles with
    members = [node for node in dwarf_variables(spec) if node.expandable]
    assert members and children(members[0])  # the tree reads members through the same file's lock
    assert open_debuginfo(binary=str(binary), source_dir=str(tmp_path)) is not info  # sources found elsewhere

    rebuilt = tmp_path / "rebuilt"
    subprocess.run(["gcc", "-O2", "-g", "-I", str(C_DIR), "-o", str(rebuilt), str(C_DIR / "probed.c")], check=True)
    rebuilt.replace(binary)  # a new file at the same path: a new DebugInfo, not the old one's answers
    assert open_debuginfo(binary=str(binary)) is not info
