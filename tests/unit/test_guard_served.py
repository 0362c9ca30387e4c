"""The feedback guard knows ``kprobe-tui serve``: a served session's screen leaves through the server's
TCP sends, so a probe there is warned about and confirmed as over SSH, with the server's PID filtered out."""

from __future__ import annotations

import os
import subprocess
import sys

from kprobe_tui.probes import guard
from kprobe_tui.probes.spec import parse_spec

CHILD = """
import json, os, sys
from kprobe_tui.probes import guard
from kprobe_tui.probes.spec import parse_spec
advice = guard.advise(parse_spec([sys.argv[1]]))
print(json.dumps({"filter": advice.filter, "warnings": advice.warnings, "confirm": advice.needs_confirmation,
                  "session": advice.session_filter, "pid": os.getpid()}))
"""


def served_advice(function: str, served_by: str) -> dict:
    """The advice a session started by this process (as the server starts one) gets."""
    import json

    done = subprocess.run([sys.executable, "-c", CHILD, function], capture_output=True, text=True, check=True,
                          env={**os.environ, guard.SERVED_BY: served_by, "SSH_CONNECTION": ""})
    return json.loads(done.stdout)


def test_a_served_session_is_warned_on_the_servers_tcp_sends_and_excludes_the_server():
    advice = served_advice("tcp_sendmsg", f"{os.getpid()} 127.0.0.1")
    assert advice["confirm"] and advice["session"] == f"common_pid != {os.getpid()}"
    assert advice["filter"] == f"common_pid != {advice['pid']} && common_pid != {os.getpid()}"
    assert "kprobe-tui serve" in advice["warnings"][0] and "127.0.0.1" in advice["warnings"][0]


def test_the_pipe_to_the_server_is_on_a_served_sessions_output_path_and_only_there():
    assert served_advice("pipe_write", f"{os.getpid()} 127.0.0.1")["confirm"]
    assert not guard.advise(parse_spec(["pipe_write"]), environ={}).needs_confirmation


def test_a_server_pid_that_is_not_our_parent_is_not_trusted_to_be_filtered():
    """The variable is the session's own to change: a PID not above us is never added to a filter."""
    with subprocess.Popen(["sleep", "30"]) as stranger:
        advice = served_advice("tcp_sendmsg", f"{stranger.pid} 127.0.0.1")
        stranger.kill()
    assert advice["confirm"] and advice["filter"] == f"common_pid != {advice['pid']}" and advice["session"] is None


def test_a_malformed_variable_is_not_a_relay():
    assert not guard.advise(parse_spec(["tcp_sendmsg"]), environ={guard.SERVED_BY: "x"}).needs_confirmation
