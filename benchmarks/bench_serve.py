"""kprobe-tui in a browser (``kprobe-tui serve``) beside kprobe-tui in tmux: key->pixels latency and memory per
session, for 1, 8 and 24 sessions at once, in one run (issue 30).

Browser: Debian's Chromium, headless, through Playwright; every tab logged in as one throw-away student. A key's
latency runs from its keydown in the page to the second animation frame after the first bytes of the app's answer
reached the page (the frame xterm.js paints them in has then been drawn: an upper bound by up to one frame,
16.7 ms at Chromium's 60 Hz). tmux: the same app as the same user in a pane of its own tmux server (80x24); a key's
latency runs from ``tmux send-keys`` to the first ``capture-pane`` that differs (tmux's screen, not a terminal
emulator's pixels; each poll is a tmux client, ~2 ms). The key is Down then Up in the function list, one session
at a time while the others sit idle, after two keys per session not counted (a session's first key
costs ~400 ms: its first detail pane). Memory: each session's kprobe-tui process, RSS and PSS (its share of pages
it shares, e.g. with the other sessions' Python), and the server's RSS. Start-up: from the first tab
(pane) opened to every session's first answer in its page, and to every page painted (headless Chromium paints
xterm.js's WebGL in software, on the same CPUs as the apps); and the server alone: N websockets opened at once
by a client without a browser, to each one's first frame.

Usage (root; chromium, playwright, tmux, setpriv): python benchmarks/bench_serve.py [--sessions 1,8,24] [--keys N]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

PROJECT = Path(__file__).parents[1]
sys.path.insert(0, str(PROJECT))

from tests.conftest import system_user  # noqa: E402
from tests.tmux_pane import Terminal  # noqa: E402

USER = "kptuibench"
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 728, "height": 510}  # 80x24 cells of textual-serve's 16 px Roboto Mono (printed below)
WARM_UP = 2  # keys per session before the measured ones
# In the page: the time of each keydown, and of the second frame after the first answer that follows it.
PROBE = """
(() => {
  window.kptui = {pending: null, done: [], first: null};
  window.addEventListener("keydown", () => { window.kptui.pending = performance.now(); }, true);
  const Native = window.WebSocket;
  window.WebSocket = function (...args) {
    const socket = new Native(...args);
    socket.addEventListener("message", () => {
      if (window.kptui.first === null) window.kptui.first = Date.now();
      const start = window.kptui.pending;
      if (start === null) return;
      window.kptui.pending = null;
      requestAnimationFrame(() => requestAnimationFrame(() => window.kptui.done.push(performance.now() - start)));
    });
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {OPEN: 1, CLOSED: 3, CONNECTING: 0, CLOSING: 2});
})();
"""


def summary(samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    return f"median {statistics.median(samples):6.1f} ms  p95 {p95:6.1f} ms  (n={len(samples)})"


def memory(pids: list[int]) -> str:
    infos = [psutil.Process(pid).memory_full_info() for pid in pids]
    rss = statistics.median(i.rss for i in infos) / 2**20
    pss = statistics.median(i.pss for i in infos) / 2**20
    return f"median RSS {rss:5.1f} MiB  PSS {pss:5.1f} MiB a session"


def served_sessions() -> dict[int, str]:
    """pid -> its terminal size (COLUMNS x ROWS) of every process kprobe-tui serve started."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            environ = dict(v.split(b"=", 1) for v in (entry / "environ").read_bytes().split(b"\0") if b"=" in v)
        except (OSError, ValueError):
            continue
        if b"KPROBE_TUI_SERVED_BY" in environ:
            found[int(entry.name)] = f"{environ[b'COLUMNS'].decode()}x{environ[b'ROWS'].decode()}"
    return found


def wait_for(condition, what: str, seconds: float = 300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise SystemExit(f"never happened: {what}")


def start_server(token_file: Path, sessions: int) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "serve", "--tokens", str(token_file), "--port", "0"],
                              stdout=subprocess.PIPE, text=True, cwd=PROJECT, start_new_session=True,
                              env={**os.environ, "KPROBE_TUI_SERVE_SESSIONS": str(sessions)})
    found = re.search(r"listening on (\S+)/", server.stdout.readline())
    if not found:
        raise SystemExit("the server did not start")
    threading.Thread(target=lambda: server.stdout.read(), daemon=True).start()  # its log, never blocking it
    return server, found[1]


def bench_browser(token_file: Path, token: str, count: int, keys: int) -> None:
    from playwright.sync_api import sync_playwright

    server, url = start_server(token_file, count)
    try:
        with sync_playwright() as driver:
            # A class's tabs are each in front of its student: none is throttled as a background tab
            browser = driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
                "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows"])
            context = browser.new_context(viewport=VIEWPORT)
            context.add_init_script(PROBE)
            login = context.new_page()
            login.goto(url + "/login")
            login.fill("input[name=user]", USER)
            login.fill("input[name=token]", token)
            login.click("button")
            started, started_at = time.perf_counter(), time.time()
            pages = [login] + [context.new_page() for _ in range(count - 1)]
            for page in pages[1:]:
                page.goto(url + "/")
            wait_for(lambda: len(served_sessions()) == count, f"{count} sessions")
            for page in pages:  # drawn: the app's first answer painted (its title)
                page.wait_for_function("document.body.classList.contains('-first-byte')", polling=50, timeout=300_000)
            ready = time.perf_counter() - started
            arrived = max(page.evaluate("window.kptui.first") for page in pages) / 1000 - started_at
            pages[0].wait_for_timeout(3000)  # the function list loaded in every session
            samples = []
            for page in pages:
                page.bring_to_front()  # a hidden tab gets no animation frames
                page.locator("textarea.xterm-helper-textarea").focus()
                for n in range(WARM_UP + keys):
                    before = page.evaluate("window.kptui.done.length")
                    page.keyboard.press("ArrowDown" if n % 2 == 0 else "ArrowUp")
                    page.wait_for_function(f"window.kptui.done.length > {before}", polling=5, timeout=30_000)
                    page.wait_for_timeout(50)  # the frame settled before the next key
                samples += page.evaluate("window.kptui.done")[WARM_UP:]
            sizes = sorted(set(served_sessions().values()))
            print(f"  browser {count:2} sessions ({', '.join(sizes)}; every first answer in {arrived:5.1f} s, "
                  f"all drawn in {ready:5.1f} s): key->pixels {summary(samples)}")
            print(f"  {'':29}{memory(list(served_sessions()))}; server RSS "
                  f"{psutil.Process(server.pid).memory_info().rss / 2**20:.1f} MiB")
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        wait_for(lambda: not served_sessions(), "every session ended")


async def first_answers(url: str, token: str, count: int) -> list[float]:
    """Seconds from opening ``count`` websockets at once (no browser: aiohttp's client) to each one's first
    frame of the app: the server's and the apps' own start-up, without Chromium's pages on the same CPUs."""
    import asyncio

    import aiohttp

    origin = {"Origin": url}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:  # a cookie of 127.0.0.1
        await client.post(url + "/login", data={"user": USER, "token": token}, headers=origin, allow_redirects=False)
        start = time.perf_counter()

        async def one() -> float:
            async with client.ws_connect(url.replace("http", "ws", 1) + "/ws?width=80&height=24", headers=origin) as socket:
                async for message in socket:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        return time.perf_counter() - start
            raise SystemExit("a session ended before its first frame")

        return await asyncio.gather(*(one() for _ in range(count)))


def bench_starts(token_file: Path, token: str, count: int) -> None:
    import asyncio

    server, url = start_server(token_file, count)
    try:
        answers = asyncio.run(first_answers(url, token, count))
        print(f"  server  {count:2} sessions opened at once, no browser: first frames in median "
              f"{statistics.median(answers):5.1f} s, all in {max(answers):5.1f} s")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        wait_for(lambda: not served_sessions(), "every session ended")


def bench_tmux(ids: tuple[int, int], count: int, keys: int) -> None:
    uid, gid = ids
    with tempfile.TemporaryDirectory() as scratch:
        terminals, pids = [], []
        started = time.perf_counter()
        try:
            for n in range(count):
                directory = Path(scratch) / str(n)
                directory.mkdir()
                os.chmod(directory, 0o755)
                terminal = Terminal(directory)
                terminals.append(terminal)
                terminal.type(f"cd / && HOME=/ sh -c 'echo $$ > {directory}/pid; exec setpriv --reuid={uid} --regid={gid} "
                              f"--init-groups -- {sys.executable} -m kprobe_tui'")
            for n, terminal in enumerate(terminals):
                terminal.wait(lambda t=terminal: "LAB MODE" in t.screen(), "the TUI is up", 300)
                pids.append(int((Path(scratch) / str(n) / "pid").read_text()))
            ready = time.perf_counter() - started
            time.sleep(3)
            samples = []
            for terminal in terminals:
                for n in range(WARM_UP + keys):
                    before = terminal.screen()
                    start = time.perf_counter()
                    terminal.keys("Down" if n % 2 == 0 else "Up")
                    while terminal.screen() == before:
                        pass
                    if n >= WARM_UP:
                        samples.append((time.perf_counter() - start) * 1000)
                    time.sleep(0.05)
            print(f"  tmux    {count:2} sessions (80x24; all drawn in {ready:5.1f} s): key->screen {summary(samples)}")
            print(f"  {'':29}{memory(pids)}")
        finally:
            for terminal in terminals:
                terminal.close()
            for pid in pids:
                wait_for(lambda pid=pid: not psutil.pid_exists(pid), f"session {pid} ended", 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,8,24", help="session counts, comma-separated (default 1,8,24)")
    parser.add_argument("--keys", type=int, default=10, help="keys per session (default 10)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: serve starts each session as its student")
    print(f"kprobe-tui serve vs tmux; {os.cpu_count()} CPUs, kernel {os.uname().release}")
    with system_user(USER) as ids, tempfile.TemporaryDirectory() as scratch:
        token_file = Path(scratch) / "tokens"
        made = subprocess.run([sys.executable, "-m", "kprobe_tui", "serve", "--tokens", str(token_file),
                               "--add-token", USER], capture_output=True, text=True, check=True, cwd=PROJECT)
        token = made.stdout.split()[-1]
        for count in (int(n) for n in args.sessions.split(",")):
            keys = args.keys if count < 24 else max(2, args.keys // 3)
            print(f"{count} session{'s' * (count > 1)}, {keys} keys each:")
            bench_starts(token_file, token, count)
            bench_browser(token_file, token, count, keys)
            bench_tmux(ids, count, keys)


if __name__ == "__main__":
    main()
