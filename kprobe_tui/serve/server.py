"""The classroom server: a login, then one kprobe-tui per browser tab, run as the student's own Unix user.

textual-serve's ``Server`` is a whole application with no place for what a classroom needs: its index and
websocket handlers start a session for anyone who reaches the port, as the server's user, from any Origin,
and its sessions outlive a killed server. So its ``AppService`` (the relay between one websocket and one
app process, and the protocol Textual's web driver speaks) is reused under an aiohttp application of our
own, with the page template and scripts of the textual-serve package; ``StudentApp`` overrides only how the
process is started (as the student, its environment built from nothing, a process group of its own) and how
it is stopped (asked, then its whole group signalled).

The server holds no tracing state: a session's probes belong to its kprobe-tui, which removes them when it
ends (on SIGTERM too, as over SSH); a session's process dies with the server (``setpriv --pdeathsig``) and
``kprobe-tui cleanup`` removes what a SIGKILLed session left.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import secrets
import shlex
import signal
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.files import NoSuchFile
from kprobe_tui.kernel.events import Events
from kprobe_tui.kernel.sources import locate
from kprobe_tui.probes.guard import SERVED_BY
from kprobe_tui.serve import tokens
from kprobe_tui.textsafe import printable

COOKIE = "kptui_login"
EXTERNAL_STYLESHEET = re.compile(r'<link\s+rel="stylesheet"\s+href="https://[^"]*"\s*/>')
LOCAL_FONT = '<style>@font-face{font-family:"Roboto Mono";src:url(/static/fonts/RobotoMono-VariableFont_wght.ttf)}</style>'
# Seconds a session has to end by itself (its probes removed) after it is asked to, before SIGKILL.
GRACE = 5.0
# What a login may hold: each session is a kprobe-tui process (~104 MiB RSS, 93 MiB PSS measured by
# benchmarks/bench_serve.py), so one student's hundred tabs would be the machine's memory.
SESSIONS_PER_LOGIN = ("KPROBE_TUI_SERVE_SESSIONS", 4)
# A login (its cookie) lasts a school day.
LOGIN_HOURS = ("KPROBE_TUI_SERVE_LOGIN_HOURS", 12)


@dataclass
class Session:
    """One browser tab's kprobe-tui."""

    login: tokens.Login
    client: str
    pid: int
    since: float = field(default_factory=time.time)


@dataclass
class LoggedIn:
    login: tokens.Login
    expires: float
    sessions: list[Session] = field(default_factory=list)


def session_command(login: tokens.Login) -> list[str]:
    """kprobe-tui as the student: their uid, gid and groups, and killed with its parent the server
    (pdeathsig TERM: the TUI removes its probes on SIGTERM, as when an SSH connection drops)."""
    return ["setpriv", f"--reuid={login.uid}", f"--regid={login.gid}", "--init-groups", "--pdeathsig", "TERM",
            "--", sys.executable, "-m", "kprobe_tui"]


def session_environment(login: tokens.Login, width: int, height: int, served_by: str) -> dict[str, str]:
    """Built from nothing: the server's own environment is root's (its HOME, its sudo variables)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": login.home, "USER": login.user, "LOGNAME": login.user,
        "LANG": os.environ.get("LANG", "C.UTF-8"), SERVED_BY: served_by,
        # What textual-serve's AppService gives its apps: Textual's web driver, at our terminal's frame rate.
        "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver", "TEXTUAL_FPS": "120",
        "TEXTUAL_COLOR_SYSTEM": "truecolor", "TERM_PROGRAM": "textual", "COLUMNS": str(width), "ROWS": str(height),
    }


def _student_app_class():
    """``StudentApp``, defined when first needed: textual-serve is imported by ``serve`` alone."""
    from textual_serve.app_service import AppService  # (~18 ms alone, -X importtime)

    class StudentApp(AppService):
        """One student's kprobe-tui behind one websocket, in a process group of its own."""

        def __init__(self, login: tokens.Login, served_by: str, **kwargs) -> None:
            super().__init__(shlex.join(session_command(login)), **kwargs)
            self.login, self.served_by = login, served_by

        async def _open_app_process(self, width: int = 80, height: int = 24):
            home = self.login.home if os.path.isdir(self.login.home) else "/"
            self._process = process = await asyncio.create_subprocess_exec(
                *session_command(self.login), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=home, start_new_session=True,
                env=session_environment(self.login, width, height, self.served_by))
            self._stdin = process.stdin
            return process

        async def stop(self) -> None:
            """Asked to quit (Textual's own exit), then its process group TERMed and, after GRACE, KILLed."""
            try:
                await asyncio.wait_for(super().stop(), GRACE)
            except (TimeoutError, OSError):
                pass
            if self._process is not None:
                await end_group(self._process)

    return StudentApp


async def end_group(process: asyncio.subprocess.Process) -> None:
    """The session's process group ended: SIGTERM (its probes removed), SIGKILL after GRACE."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(process.wait(), GRACE)
        except TimeoutError:
            continue
        try:  # the leader has gone; any child of it left in the group goes too
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


class Classroom:
    """The aiohttp application: login, the app page, its websocket, the teacher's view."""

    def __init__(self, token_file: Path, public_url: str | None = None, pam: bool = False) -> None:
        self.token_file, self.pam = token_file, pam
        self.public_url = public_url.rstrip("/") if public_url else None
        self.logins: dict[str, LoggedIn] = {}
        self.apps: set = set()  # every StudentApp running, to stop with the server
        self.sessions_per_login = int(bound(*SESSIONS_PER_LOGIN))
        self.login_seconds = 3600 * bound(*LOGIN_HOURS)

    def make_app(self):
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it
        from textual_serve import server as textual_serve  # (with aiohttp ~235 ms, -X importtime)

        self.templates = Path(textual_serve.__file__).parent / "templates"
        app = web.Application(client_max_size=64 * 1024)  # a login form is a few hundred bytes
        app.add_routes([web.get("/", self.index), web.get("/login", self.login_page), web.post("/login", self.log_in),
                        web.get("/ws", self.websocket), web.get("/teacher", self.teacher),
                        web.static("/static", Path(textual_serve.__file__).parent / "static")])
        return app

    # -- who is asking ---------------------------------------------------------------------------

    def origin(self, request) -> str:
        """The one Origin our pages have: the public URL's, or the scheme and Host this request came to."""
        if self.public_url:
            scheme, _, rest = self.public_url.partition("://")
            return f"{scheme}://{rest.split('/', 1)[0]}"
        return f"{request.scheme}://{request.host}"

    def same_origin(self, request) -> bool:
        return request.headers.get("Origin") == self.origin(request)

    def logged_in(self, request) -> LoggedIn | None:
        found = self.logins.get(request.cookies.get(COOKIE, ""))
        if found is not None and found.expires < time.time():
            del self.logins[request.cookies[COOKIE]]
            return None
        return found

    # -- pages -----------------------------------------------------------------------------------

    async def login_page(self, request, problem: str = "", status: int = 200):
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

        message = f'<p class="problem">{html.escape(problem)}</p>' if problem else ""
        secret = "token or Unix password" if self.pam else "token"
        return web.Response(status=status, content_type="text/html", text=LOGIN_PAGE.format(problem=message, secret=secret))

    async def log_in(self, request):
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

        if not self.same_origin(request):
            return await self.login_page(request, "refused: this form was not sent from this server's page", 403)
        form = await request.post()
        user, token = str(form.get("user", "")), str(form.get("token", ""))
        try:
            login = tokens.check(self.token_file, user, token)
        except UserError as exc:  # changed since the start: the administrator is told, the student refused
            if not (self.pam and isinstance(exc, NoSuchFile)):
                say(str(exc))
            login = None
        if login is None and self.pam and user and token:  # PAM blocks (3 s a wrong password): off the loop
            login = await asyncio.get_running_loop().run_in_executor(None, tokens.check_password, user, token)
        if login is None:
            say(f"refused a login as {user!r} from {request.remote}")
            return await self.login_page(request, f"unknown user or wrong {'token or password' if self.pam else 'token'}", 403)
        now = time.time()
        for key in [key for key, logged in self.logins.items() if logged.expires < now and not logged.sessions]:
            del self.logins[key]
        key = secrets.token_urlsafe(32)
        self.logins[key] = LoggedIn(login, now + self.login_seconds)
        say(f"{user} logged in from {request.remote}")
        response = web.HTTPSeeOther("/teacher" if login.teacher and "teacher" in form else "/")
        response.set_cookie(COOKIE, key, httponly=True, samesite="Strict", secure=self.origin(request).startswith("https:"),
                            max_age=int(self.login_seconds), path="/")
        return response

    async def index(self, request):
        import jinja2  # here: ~27 ms to import alone (-X importtime); make_app's textual_serve has loaded it
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

        if self.logged_in(request) is None:
            raise web.HTTPSeeOther("/login")
        scheme = "wss" if self.origin(request).startswith("https") else "ws"
        host = self.origin(request).split("://", 1)[1]
        environment = jinja2.Environment(loader=jinja2.FileSystemLoader(self.templates), autoescape=True)
        page = environment.get_template("app_index.html").render(
            font_size=16, app_websocket_url=f"{scheme}://{host}/ws", config={"static": {"url": "/static/"}},
            application={"name": "kprobe-tui"}, ping_url="")
        # The template's web font comes from Google: served from textual-serve's own copy instead, a student's
        # browser tells no third party where it is, and an offline lab's page does not wait for that fetch to fail.
        page = EXTERNAL_STYLESHEET.sub(LOCAL_FONT, page)
        return web.Response(text=page, content_type="text/html")

    async def websocket(self, request):
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

        if not self.same_origin(request):
            say(f"refused a websocket from Origin {request.headers.get('Origin')!r} ({request.remote})")
            raise web.HTTPForbidden(text="refused: a page of another origin")
        logged = self.logged_in(request)
        if logged is None:
            raise web.HTTPForbidden(text="log in first")
        if len(logged.sessions) >= self.sessions_per_login:
            raise web.HTTPTooManyRequests(text=f"{self.sessions_per_login} sessions already open: close a tab "
                                               "(KPROBE_TUI_SERVE_SESSIONS sets the number)")
        socket = web.WebSocketResponse(heartbeat=15)
        await socket.prepare(request)
        from textual_serve.download_manager import DownloadManager  # here: loaded with textual_serve by make_app

        app = _student_app_class()(logged.login, f"{os.getpid()} {request.remote}", write_bytes=socket.send_bytes,
                                   write_str=socket.send_str, close=socket.close, download_manager=DownloadManager())
        self.apps.add(app)
        try:
            await app.start(_size(request.query.get("width"), 80), _size(request.query.get("height"), 24))
            session = Session(logged.login, str(request.remote), app._process.pid)
            logged.sessions.append(session)
            say(f"{logged.login.user}: session {session.pid} started")
            try:
                await relay(socket, app)
            finally:
                logged.sessions.remove(session)
                say(f"{logged.login.user}: session {session.pid} ended")
        finally:
            await app.stop()
            self.apps.discard(app)
        return socket

    async def teacher(self, request):
        from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

        logged = self.logged_in(request)
        if logged is None or not logged.login.teacher:
            raise web.HTTPForbidden(text="the teacher's view needs a teacher's login")
        probes = made_probes()
        rows = []
        for other in self.logins.values():
            for session in other.sessions:
                made = probes.get(session.pid, []) if isinstance(probes, dict) else [probes]
                rows.append("<tr>" + "".join(f"<td>{html.escape(printable(str(cell)))}</td>" for cell in (
                    other.login.user, other.login.uid, time.strftime("%H:%M:%S", time.localtime(session.since)),
                    session.client, session.pid, ", ".join(made) or "none")) + "</tr>")
        body = "".join(rows) or '<tr><td colspan="6">nobody is connected</td></tr>'
        return web.Response(text=TEACHER_PAGE.format(rows=body), content_type="text/html")

    async def stop_all(self) -> None:
        await asyncio.gather(*(app.stop() for app in list(self.apps)), return_exceptions=True)


def made_probes() -> dict[int, list[str]] | str:
    """Each kprobe-tui's probes by its PID (its run's group is ``kptui_<pid>``, ``kptui_<pid>_N``),
    or why they cannot be read."""
    made: dict[int, list[str]] = {}
    try:
        for event in Events(locate(mount=False).tracing()).list():
            run = event.group.split("_")
            if len(run) >= 2 and run[0] == "kptui" and run[1].isdigit():
                made.setdefault(int(run[1]), []).append(event.full_name)
    except UserError as exc:
        return f"cannot read the probes: {exc.message}"
    return made


async def relay(socket, app) -> None:
    """The browser's messages to the app: textual-serve's protocol (stdin, resize, ping, blur, focus),
    a message of another shape ignored rather than ending the server's handler with a traceback."""
    from aiohttp import WSMsgType  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

    async for message in socket:
        if message.type != WSMsgType.TEXT:
            continue
        try:
            kind, data = message.json()
            if kind == "stdin":
                await app.send_bytes(str(data).encode())
            elif kind == "resize":
                await app.set_terminal_size(_size(data.get("width"), 80), _size(data.get("height"), 24))
            elif kind == "ping":
                await socket.send_json(["pong", data])
            elif kind in ("blur", "focus"):
                await getattr(app, kind)()
        except (ValueError, TypeError, AttributeError):
            continue


def _size(value, default: int) -> int:
    """A terminal dimension from the browser: a number from 1 to 1000, else the default."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if 0 < number <= 1000 else default


def bound(variable: str, default: float) -> float:
    """A positive number from the environment (``default`` when unset), else a UserError naming it."""
    text = os.environ.get(variable, "")
    try:
        value = float(text) if text else default
    except ValueError:
        value = -1
    if not 0 < value < float("inf"):
        raise UserError(f"{variable}={text!r} is not a positive number", f"unset it for {default}, or give a number above 0")
    return value


def say(message: str) -> None:
    print(f"kprobe-tui serve: {message}", flush=True)


def check_listening(host: str, certfile: str | None, keyfile: str | None):
    """The TLS context, or None on loopback; beyond loopback, TLS or a refusal (the token crosses the network)."""
    if bool(certfile) != bool(keyfile):
        raise UserError("--certfile and --keyfile go together", "give both, or neither on 127.0.0.1")
    if os.geteuid() != 0:
        raise UserError(f"serve runs each session as its student's user, which only root can (you are uid {os.geteuid()})",
                        "run kprobe-tui serve as root")
    if not certfile:
        if host not in ("127.0.0.1", "::1", "localhost") and not host.startswith("127."):
            raise UserError(f"refusing to listen on {host} without TLS: every token would cross the network in clear",
                            "give --certfile and --keyfile, or listen on 127.0.0.1 behind a reverse proxy that has TLS")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load the certificate {certfile} with key {keyfile}: {exc}",
                        "give a PEM certificate and its private key") from None
    return context


async def serve(host: str, port: int, token_file: Path, tls, public_url: str | None, pam: bool) -> None:
    """Listen until SIGTERM, SIGHUP or SIGINT; then every session is ended before the server exits."""
    from aiohttp import web  # here: aiohttp costs ~160-180 ms to import (-X importtime) and serve --add-token never needs it

    classroom = Classroom(token_file, public_url, pam)  # the bounds refused before listening
    runner = web.AppRunner(classroom.make_app(), handle_signals=False, access_log=None)  # no request is logged
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", "give another --port") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    port = runner.addresses[0][1]  # the one chosen for --port 0
    say(f"listening on {'https' if tls else 'http'}://{host}:{port}/ (server pid {os.getpid()})")
    try:
        await stop.wait()
    finally:
        say("stopping: ending every session")
        await classroom.stop_all()
        await runner.cleanup()


LOGIN_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kprobe-tui: log in</title>
<style>body{{background:#0c181f;color:#eee;font-family:monospace;display:flex;justify-content:center;margin-top:15vh}}
input,button{{font:inherit;margin:.3em 0;padding:.3em}} .problem{{color:#f77}}</style></head>
<body><form method="post" action="/login"><h1>kprobe-tui</h1>{problem}
<label>user<br><input name="user" autocomplete="username" autofocus></label><br>
<label>{secret}<br><input name="token" type="password" autocomplete="current-password"></label><br>
<label><input type="checkbox" name="teacher"> teacher's view</label><br>
<button type="submit">log in</button></form></body></html>
"""

TEACHER_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5"><title>kprobe-tui: the class</title>
<style>body{{font-family:monospace}} td,th{{border:1px solid #999;padding:.2em .6em}} table{{border-collapse:collapse}}</style>
</head><body><h1>Connected</h1>
<table><tr><th>user</th><th>uid</th><th>since</th><th>from</th><th>session pid</th><th>probes made</th></tr>
{rows}</table></body></html>
"""
