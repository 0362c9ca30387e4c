"""A tmux pane driven as a person drives a terminal: typed lines, the screen read back, waits with a deadline.

Each pane has its own tmux server (a socket in a test's directory), so nothing else's sessions are touched.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).parents[1]

FLAGS = "#{alternate_on} #{cursor_flag} #{mouse_any_flag} #{mouse_button_flag} #{mouse_standard_flag} #{mouse_sgr_flag}"


class Terminal:
    """One tmux pane running bash, 80x24."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / "tmux.sock"
        self.tmux("new-session", "-d", "-x", "80", "-y", "24", "-s", "t", "bash --norc --noprofile")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", line)
        self.tmux("send-keys", "-t", "t", "Enter")

    def keys(self, *keys: str) -> None:
        """Keys by tmux's names (Enter, Escape, C-s, F1), or letters typed as a person types them."""
        self.tmux("send-keys", "-t", "t", *keys)

    def click(self, x: int, y: int) -> None:
        """A left click at column ``x``, row ``y`` (0-based), as the terminal reports it (SGR mouse, 1006)."""
        self.tmux("send-keys", "-t", "t", "-l", f"\x1b[<0;{x + 1};{y + 1}M\x1b[<0;{x + 1};{y + 1}m")

    def find(self, text: str) -> tuple[int, int]:
        """Where ``text`` first shows on the screen: (column, row), for a click."""
        for row, line in enumerate(self.screen().splitlines()):
            if text in line:
                return line.index(text), row
        raise AssertionError(f"{text!r} is not on the screen:\n{self.screen()}")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def flags(self) -> str:
        return self.tmux("display", "-p", "-t", "t", FLAGS).strip()

    def wait(self, condition, what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError(f"never happened: {what}\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True)


def start_kprobe_tui(terminal: Terminal, tmp_path: Path, *args: str, env: str = "") -> int:
    """kprobe-tui in the pane, from the checkout (its exit status printed after it); its PID once it draws."""
    pid_file = tmp_path / "pid"
    terminal.type(f"cd {PROJECT} && {env} TMPDIR={tmp_path} sh -c 'echo $$ > {pid_file}; "
                  f"exec {sys.executable} -m kprobe_tui {' '.join(args)}'; echo EXIT=$?")
    terminal.wait(lambda: "kprobe-tui" in terminal.screen() and terminal.flags().startswith("1 "), "the TUI is up")
    return int(pid_file.read_text())
