"""Every approved UI snapshot is also published under screenshots/, named after its test."""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).parent
SCREENSHOTS = HERE.parents[1] / "screenshots"


def pytest_sessionfinish(session, exitstatus):
    for svg in (HERE / "__snapshots__").glob("*/*.svg"):
        target = SCREENSHOTS / f"{svg.parent.name.removeprefix('test_')}--{svg.stem.removeprefix('test_')}.svg"
        if not target.exists() or target.read_bytes() != svg.read_bytes():
            SCREENSHOTS.mkdir(exist_ok=True)
            shutil.copyfile(svg, target)
