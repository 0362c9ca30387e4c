"""Regenerate screenshots/*.svg from the real app, in the states the snapshot tests check.

    python screenshots/generate.py [NAME...]      # all, or only states whose name starts with NAME

The states live in tests/tui/states.py (one definition for both); the SVGs are taken by the same
function pytest-textual-snapshot uses and stored as it stores them, so a screenshot is byte for byte
its approved snapshot (tests/tui/__snapshots__/test_screens/). This script
sits beside what it writes and outside the package and the test suite: it is a maintainer's tool.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout: kprobe_tui and tests.tui.states

from pytest_textual_snapshot import (
    normalize_svg,  # as the approved snapshots are stored
)
from textual._doc import take_svg_screenshot  # what pytest-textual-snapshot calls

from tests.tui.states import shot_name, shots


def main(prefixes: list[str]) -> int:
    for state, size in shots():
        if prefixes and not any(state.name.startswith(prefix) for prefix in prefixes):
            continue
        with state.environment():
            svg = take_svg_screenshot(app=state.app(), terminal_size=size, run_before=state.reach)
        target = HERE / f"{shot_name(state, size)}.svg"
        target.write_text(normalize_svg(svg))
        print(target.relative_to(HERE.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
