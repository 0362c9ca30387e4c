"""``kprobe-tui serve``: the TUI in a browser, one session per authenticated student, as that student's Unix user."""
