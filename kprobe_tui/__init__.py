"""kprobe-tui: explore and use Linux dynamic probes from the terminal."""

__version__ = "0.1.0"
