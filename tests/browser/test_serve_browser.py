"""``kprobe-tui serve`` driven by real browsers: Debian's Chromium, headless, through Playwright (issue 30).

Two throw-away Unix users log in with the tokens ``serve --add-token`` made; each session must run as its
student's uid (read from the host's /proc), browse the kernel's functions and open one's source. A bad
token, a page without a login and a page of another origin are refused; a closed tab, and a server killed
with SIGKILL or SIGHUP, leave no kprobe-tui process. What the browser shows is read from the websocket's
frames (the terminal draws on a canvas); ``screenshots/serve-source.png`` and ``serve-teacher.png`` are taken
here for the README.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import system_user

CHROMIUM = Path("/usr/bin/chromium")
playwright = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install playwright)")
pytestmark = [pytest.mark.live,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)"),
              pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")]

PROJECT = Path(__file__).parents[2]
SCREENSHOTS = PROJECT / "screenshots"
STUDENTS = ("kptuiweb1", "kptuiweb2")  # the second is also the teacher
# The footer while the filter has the focus: "/ Filter" and the help keys, none of the list's.
FILTER_FOOTER = re.compile(r"/ Filter +▏?\^p")
ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    """user -> (uid, token), and the token file holding them (0600, root's, as serve demands)."""
    directory = tmp_path_factory.mktemp("serve")
    token_file = directory / "tokens"
    with system_user(STUDENTS[0]) as first, system_user(STUDENTS[1]) as second:
        made = {}
        for user, (uid, _) in zip(STUDENTS, (first, second)):
            extra = ["--teacher"] if user == STUDENTS[1] else []
            done = kprobe_tui("serve", "--tokens", str(token_file), "--add-token", user, *extra)
            made[user] = (uid, done.stdout.split()[-1])
        yield made, token_file


def kprobe_tui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, check=True,
                          cwd=PROJECT, timeout=60)


class Server:
    """``kprobe-tui serve --port 0`` in a process group of its own; ``url`` once it listens."""

    def __init__(self, token_file: Path, *options: str, **environ: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "serve", "--tokens", str(token_file),
                                         "--port", "0", *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, cwd=PROJECT, start_new_session=True, env={**os.environ, **environ})
        first = self.process.stdout.readline()
        found = re.search(r"listening on (https?://127\.0\.0\.1:(\d+))/", first)
        assert found, first + self.process.stdout.read()
        self.url, self.port = found[1], int(found[2])
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def server(students):
    running = Server(students[1])
    yield running
    running.stop()
    wait_for(lambda: not sessions(), "every session ended with the server")


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


def sessions(uid: int | None = None) -> dict[int, int]:
    """pid -> real uid of every process a ``kprobe-tui serve`` started (its environment names the server), on
    the host: other kprobe-tui processes (other tests') are not sessions."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            served = b"KPROBE_TUI_SERVED_BY=" in (entry / "environ").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if served:
            real = int(re.search(r"^Uid:\s+(\d+)", status, re.M)[1])
            if uid is None or real == uid:
                found[int(entry.name)] = real
    return found


def wait_for(condition, what: str, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


class Student:
    """One browser tab logged in as ``user``; ``screen()`` is the text the app has sent it so far."""

    def __init__(self, browser, server: Server, user: str, token: str, teacher: bool = False) -> None:
        self.context = browser.new_context(viewport={"width": 1000, "height": 560}, ignore_https_errors=True)
        self.page = self.context.new_page()
        self.frames: list[str] = []
        self.page.on("websocket", lambda socket: socket.on("framereceived", self._received))
        self.page.goto(server.url + "/")
        self.page.fill("input[name=user]", user)
        self.page.fill("input[name=token]", token)
        if teacher:
            self.page.check("input[name=teacher]")
        self.page.click("button")

    def _received(self, payload) -> None:
        self.frames.append(payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload)

    def screen(self, since: int = 0) -> str:
        """The text sent (from frame ``since`` on), without the terminal's escape sequences."""
        return ESCAPES.sub("", "".join(self.frames[since:]))

    def wait_to_show(self, text: str | re.Pattern, what: str, since: int = 0, seconds: float = 60) -> None:
        """Until the app has sent ``text``; Playwright delivers frames only while it is called, so it waits."""
        deadline = time.monotonic() + seconds
        while not (text.search(self.screen(since)) if isinstance(text, re.Pattern) else text in self.screen(since)):
            assert time.monotonic() < deadline, f"never shown: {what}\n{self.screen()[-3000:]}"
            self.page.wait_for_timeout(100)

    def keys(self, *keys: str) -> None:
        self.page.locator("textarea.xterm-helper-textarea").focus()
        for key in keys:
            self.page.keyboard.press(key)

    def close(self) -> None:
        self.context.close()


def test_two_students_each_run_as_their_own_uid_browse_and_open_source(browser, server, students):
    made, _ = students
    tabs = {user: Student(browser, server, user, token) for user, (uid, token) in made.items()}
    for user, tab in tabs.items():
        uid = made[user][0]
        pid = wait_for(lambda uid=uid: sessions(uid), f"a session as {user} (uid {uid})")
        status = Path(f"/proc/{next(iter(pid))}/status").read_text()
        assert re.search(rf"^Uid:\s+{uid}\s+{uid}\s+{uid}\s+{uid}$", status, re.M), status  # real, effective, saved, fs
        tab.wait_to_show(f"LAB MODE: read-only — you are uid {uid}", f"{user}'s lab-mode title")
    assert not sessions(0), "no session runs as the server's user"
    for user, tab in tabs.items():
        # "/" focuses the filter once the app has handled it: a letter sent sooner goes to the list's keys, so
        # first the footer of the focused filter (the list's keys gone from it)
        sent = len(tab.frames)
        tab.keys("/")
        tab.wait_to_show(FILTER_FOOTER, f"{user}'s filter focused", since=sent)
        tab.keys(*"vfs_rea[d]")  # a glob: vfs_read alone, whatever else has vfs_read in its name
        # The filter applies as the app gets to it: Enter opens what is highlighted then, so first the
        # detail pane of vfs_read (its BTF prototype), then the source screen (DWARF source or, without it, why)
        tab.wait_to_show("ssize_t vfs_read(struct file", f"{user}'s list filtered to vfs_read")
        opened = len(tab.frames)
        tab.keys("Enter")
        tab.wait_to_show("vfs_read(struct file", f"{user}'s source of vfs_read", since=opened)
    tabs[STUDENTS[0]].page.screenshot(path=str(SCREENSHOTS / "serve-source.png"))
    for user, tab in tabs.items():
        tab.close()
        wait_for(lambda user=user: not sessions(made[user][0]), f"{user}'s session ended with the tab")
    assert sum("session" in line and "ended" in line for line in server.lines) == 2


def test_a_wrong_token_gets_no_session_and_no_page(browser, server, students):
    made, _ = students
    tab = Student(browser, server, STUDENTS[0], "not-" + made[STUDENTS[0]][1])
    assert "unknown user or wrong token" in tab.page.content()
    assert handshake(server, origin=server.url, cookie="") == 403  # no login: no websocket either
    tab.page.goto(server.url + "/")
    assert tab.page.url.endswith("/login")
    tab.close()
    assert not sessions(made[STUDENTS[0]][0])
    assert not any(made[STUDENTS[0]][1][4:] in line for line in server.lines), "a token never reaches the log"


def test_a_page_of_another_origin_cannot_open_a_session(browser, server, students):
    """A page on the same host but another port is the same site: the browser sends it the login cookie,
    so only the Origin check stops it. The same handshake from our own origin is what the app page does."""
    made, _ = students
    uid, token = made[STUDENTS[0]]
    tab = Student(browser, server, STUDENTS[0], token)
    wait_for(lambda: sessions(uid), "the student's own session")
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in tab.context.cookies())
    with foreign_site() as foreign:
        page = tab.context.new_page()
        page.goto(foreign)
        outcome = page.evaluate("""url => new Promise(done => {
            const socket = new WebSocket(url);
            socket.onopen = () => done("open"); socket.onerror = () => done("refused"); })""",
                                f"ws://127.0.0.1:{server.port}/ws")
    assert outcome == "refused"
    assert any(f"refused a websocket from Origin '{foreign.rstrip('/')}'" in line for line in server.lines)
    assert handshake(server, origin="http://evil.example", cookie=cookie) == 403
    assert len(sessions(uid)) == 1, "only the student's own tab has a session"
    tab.close()
    wait_for(lambda: not sessions(uid), "the tab's session ended")


def test_the_teacher_sees_who_is_connected_and_the_probes_of_their_session(browser, server, students):
    made, _ = students
    student = Student(browser, server, STUDENTS[0], made[STUDENTS[0]][1])
    pid = next(iter(wait_for(lambda: sessions(made[STUDENTS[0]][0]), "the student's session")))
    define(f"p:kptui_{pid}/served_probe /usr/bin/true:0")  # as if the session had made it: its run's group
    try:
        teacher = Student(browser, server, STUDENTS[1], made[STUDENTS[1]][1], teacher=True)
        assert teacher.page.url.endswith("/teacher")
        rows = teacher.page.locator("tr").all_inner_texts()
        row = next(r for r in rows if r.startswith(STUDENTS[0]))
        assert str(pid) in row and f"kptui_{pid}/served_probe" in row and "127.0.0.1" in row
        teacher.page.screenshot(path=str(SCREENSHOTS / "serve-teacher.png"))
        student.page.goto(server.url + "/teacher")
        assert "needs a teacher's login" in student.page.content()
        teacher.close()
    finally:
        define(f"-:kptui_{pid}/served_probe")
    student.close()


def test_a_login_holds_at_most_its_bound_of_sessions(browser, students):
    made, token_file = students
    uid, token = made[STUDENTS[0]]
    server = Server(token_file, KPROBE_TUI_SERVE_SESSIONS="1")
    try:
        tab = Student(browser, server, STUDENTS[0], token)
        wait_for(lambda: sessions(uid), "the first session")
        cookie = "; ".join(f"{c['name']}={c['value']}" for c in tab.context.cookies())
        assert handshake(server, origin=server.url, cookie=cookie) == 429
        assert len(sessions(uid)) == 1
        tab.close()
        wait_for(lambda: not sessions(uid), "the session ended with its tab")
        assert handshake(server, origin=server.url, cookie=cookie) == 101  # the login's place is free again
    finally:
        server.stop()
    wait_for(lambda: not sessions(), "every session ended with the server")


def test_with_a_certificate_the_class_is_served_over_tls_and_the_cookie_is_secure(browser, students, tmp_path):
    made, token_file = students
    uid, token = made[STUDENTS[0]]
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")], check=True, capture_output=True)
    server = Server(token_file, "--certfile", str(tmp_path / "cert.pem"), "--keyfile", str(tmp_path / "key.pem"))
    try:
        assert server.url.startswith("https://")
        tab = Student(browser, server, STUDENTS[0], token)
        tab.wait_to_show(f"LAB MODE: read-only — you are uid {uid}", "the session over wss://")
        assert all(cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
                   for cookie in tab.context.cookies())
        tab.close()
    finally:
        server.stop()
    wait_for(lambda: not sessions(), "every session ended with the server")


def test_with_pam_a_student_logs_in_with_their_unix_password(browser, students):
    pytest.importorskip("pamela", reason="--pam needs pamela (pip install pamela)")
    made, token_file = students
    uid, _ = made[STUDENTS[0]]
    password = "correct horse battery staple"
    subprocess.run(["chpasswd"], input=f"{STUDENTS[0]}:{password}\n", text=True, check=True)
    try:
        server = Server(token_file, "--pam")
        try:
            wrong = Student(browser, server, STUDENTS[0], password + "!")
            assert "unknown user or wrong token or password" in wrong.page.content()
            wrong.close()
            tab = Student(browser, server, STUDENTS[0], password)
            tab.wait_to_show(f"LAB MODE: read-only — you are uid {uid}", "the session of a PAM login")
            assert sessions(uid) and not any(password in line for line in server.lines)
            tab.close()
        finally:
            server.stop()
    finally:
        subprocess.run(["usermod", "--password", "!", STUDENTS[0]], check=True)  # locked again, as useradd made it
    wait_for(lambda: not sessions(), "every session ended with the server")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP])
def test_killing_the_server_ends_every_session(browser, students, signum):
    made, token_file = students
    server = Server(token_file)
    tabs = [Student(browser, server, user, token) for user, (_, token) in made.items()]
    for uid, _ in made.values():
        wait_for(lambda uid=uid: sessions(uid), f"a session as uid {uid}")
    pids = list(sessions())
    os.kill(server.process.pid, signum)
    server.process.wait(timeout=30)
    wait_for(lambda: not sessions(), f"no kprobe-tui session after the server's {signal.Signals(signum).name}", 30)
    for tab in tabs:
        tab.close()
    kprobe_tui("cleanup")
    left = Path("/sys/kernel/tracing/dynamic_events").read_text()
    assert not any(f"kptui_{pid}" in left for pid in pids)


def define(line: str) -> None:
    """One line to uprobe_events (Python's append mode seeks, which tracefs refuses)."""
    control = os.open("/sys/kernel/tracing/uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(control, f"{line}\n".encode())
    finally:
        os.close(control)


def handshake(server: Server, origin: str, cookie: str) -> int:
    """The HTTP status of a websocket handshake to /ws, as a client that sets its own Origin sends it."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("GET", "/ws?width=80&height=24", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": origin, "Cookie": cookie})
    status = connection.getresponse().status
    connection.close()
    return status


class foreign_site:
    """A page of another origin on this host: http://127.0.0.1:<another port>/."""

    def __enter__(self) -> str:
        class Blank(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<html><body>another site</body></html>")

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Blank)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.http.server_address[1]}/"

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()
