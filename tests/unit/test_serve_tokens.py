"""The token file of ``kprobe-tui serve``: made by --add-token (hashed, 0600), read only when it is the
server's user's alone, every malformed line a clean error naming it; and where serve refuses to listen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.serve import tokens

PROJECT = Path(__file__).parents[2]
# A user every Debian system has, never root.
USER = "nobody"


def test_a_token_is_stored_hashed_in_a_file_only_its_owner_reads(tmp_path):
    path = tmp_path / "etc" / "serve-tokens"
    token = tokens.add(path, USER, teacher=False)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and token not in path.read_text()
    login = tokens.check(path, USER, token)
    assert login is not None and login.user == USER and not login.teacher
    assert tokens.check(path, USER, token + "x") is None and tokens.check(path, "root", token) is None
    again = tokens.add(path, USER, teacher=True)  # replaces the user's token
    assert tokens.check(path, USER, token) is None and tokens.check(path, USER, again).teacher


def test_a_token_file_others_may_read_is_refused(tmp_path):
    path = tmp_path / "tokens"
    tokens.add(path, USER, teacher=False)
    path.chmod(0o644)
    with pytest.raises(UserError, match="others could read or change who logs in") as refused:
        tokens.read_entries(path)
    assert f"chmod 600 {path}" in refused.value.hint


def test_a_malformed_line_is_named(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# comment\n\nalice student\n")
    path.chmod(0o600)
    with pytest.raises(UserError, match=r"line 3: not USER ROLE SHA256"):
        tokens.read_entries(path)


def test_root_gets_no_token_and_a_root_line_logs_nobody_in(tmp_path):
    with pytest.raises(UserError, match="as root is what kprobe-tui serve exists to avoid"):
        tokens.add(tmp_path / "tokens", "root", teacher=False)
    path = tmp_path / "tokens"
    path.write_text(f"root teacher {tokens._digest('t')}\n")  # written by hand
    path.chmod(0o600)
    assert tokens.check(path, "root", "t") is None


def test_a_fifo_for_a_token_file_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UserError, match="FIFO"):
        tokens.read_entries(tmp_path / "fifo")


@pytest.mark.skipif(os.geteuid() != 0, reason="serve checks root before where it listens")
def test_serve_refuses_to_listen_beyond_loopback_without_tls(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kprobe_tui", "serve", "--host", "0.0.0.0", "--tokens", str(tmp_path / "t")],
                          capture_output=True, text=True, cwd=PROJECT, timeout=60)
    assert done.returncode == 2 and "refusing to listen on 0.0.0.0 without TLS" in done.stderr
    assert "--certfile and --keyfile" in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="serve checks root before its bounds")
def test_a_bound_that_is_not_a_positive_number_is_refused_before_listening(tmp_path):
    path = tmp_path / "tokens"
    tokens.add(path, USER, teacher=False)
    done = subprocess.run([sys.executable, "-m", "kprobe_tui", "serve", "--tokens", str(path), "--port", "0"],
                          capture_output=True, text=True, cwd=PROJECT, timeout=60,
                          env={**os.environ, "KPROBE_TUI_SERVE_SESSIONS": "many"})
    assert done.returncode == 2 and "KPROBE_TUI_SERVE_SESSIONS='many' is not a positive number" in done.stderr
    assert "listening" not in done.stdout
