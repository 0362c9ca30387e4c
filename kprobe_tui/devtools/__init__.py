"""Checks for developers and CI (``python -m kprobe_tui.devtools.layering``); nothing here runs in the app."""
