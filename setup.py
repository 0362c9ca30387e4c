"""The package list is found, never kept by hand: a hand-kept list once lost two packages from the wheel.

Every package under kprobe_tui/ is found; the one place outside it is themes/ (data, kept at the top of the
tree), installed as kprobe_tui.themes. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["kprobe_tui", "kprobe_tui.*"]), "kprobe_tui.themes"])
