"""Servers for the debuginfod tests: elfutils' real ``debuginfod``, and a misbehaving one of our own.

The real server (Debian's ``debuginfod`` package) indexes a directory the test fills: loose ELF
files (``-F``) and tar archives (``-Z .tar``) holding debug files and the sources they name, as a
distribution's packages do. It listens on an unused port (debuginfod 0.188 has no option to bind
only 127.0.0.1; the tests reach it at 127.0.0.1). ``ServedFile`` stands in where no real server
can misbehave on cue: a body cut in the middle, a slow trickle, Range requests. ``Hostile`` is a
server that means harm: an endless body, a huge announced size, headers a byte at a time, a redirect
elsewhere. Either speaks TLS with ``tls=`` a certificate from ``self_signed``.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

DEBUGINFOD = shutil.which("debuginfod")


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Debuginfod:
    """``debuginfod -F -Z .tar DIR`` on 127.0.0.1:<unused port>, stopped by ``stop()`` (or ``with``)."""

    def __init__(self, served: Path, work: Path, *options: str) -> None:
        self.served = served
        self.work = work
        self.options = options  # more of debuginfod's options, e.g. --disable-source-scan
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, expect: list[str], timeout: float = 60) -> Debuginfod:
        """Start it and wait until every build-id in ``expect`` is served (the first scan has run)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}  # no federation
        env["HOME"] = str(self.work)
        for _attempt in range(3):  # another process may take the port between our probe and its bind
            self.port = unused_port()
            log = open(self.work / f"debuginfod-{self.port}.log", "wb")  # noqa: SIM115
            self.process = subprocess.Popen(
                [DEBUGINFOD, "-F", "-Z", ".tar", "-d", str(self.work / f"db-{self.port}.sqlite"), "-p", str(self.port),
                 "-t", "0", "-g", "0", "-c", "1", *self.options, str(self.served)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            log.close()
            if self._wait_ready(expect, timeout):
                return self
            self.stop()
        raise RuntimeError(f"debuginfod did not start: {(self.work / f'debuginfod-{self.port}.log').read_text()[-2000:]}")

    def _wait_ready(self, expect: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        pending = list(expect)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            pending = [build_id for build_id in pending if not self._serves(build_id)]
            if not pending:
                return True
            time.sleep(0.1)
        return False

    def _serves(self, build_id: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/buildid/{build_id}/debuginfo", timeout=5):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> Debuginfod:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def self_signed(directory: Path) -> Path:
    """A certificate and its key (one PEM file) for 127.0.0.1; clients trust it through SSL_CERT_FILE."""
    pem = directory / "127.0.0.1.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(pem), "-out", str(directory / "cert.pem")],
                   check=True, capture_output=True)
    pem.write_text(pem.read_text() + (directory / "cert.pem").read_text())
    return pem


def _serve(handler: type[http.server.BaseHTTPRequestHandler], tls: Path | None) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


class ServedFile:
    """One file behind ``/buildid/<id>/debuginfo`` on a loopback HTTP server of the test's own.

    ``cut``: how many first responses stop after half the body (the connection then closes);
    ``ranges``: honour Range (206) and say Accept-Ranges; ``delay``: seconds between ``chunk``s;
    ``pause_after``: bytes after which the body stops until the server is closed (a stalled transfer).
    ``requests`` records each request's Range header (or None).
    """

    def __init__(self, data: bytes, build_id: str, *, cut: int = 0, ranges: bool = False, delay: float = 0.0,
                 chunk: int = 1 << 16, pause_after: int | None = None, tls: Path | None = None) -> None:
        self.data, self.build_id, self.cut, self.ranges, self.delay = data, build_id, cut, ranges, delay
        self.chunk, self.pause_after = chunk, pause_after
        self.closing = threading.Event()
        self.requests: list[str | None] = []
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                served.requests.append(self.headers.get("Range"))
                if self.path != f"/buildid/{served.build_id}/debuginfo":
                    self.send_error(404)
                    return
                start = 0
                wanted = self.headers.get("Range", "")
                if served.ranges and wanted.startswith("bytes="):
                    start = int(wanted[6:].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(served.data) - 1}/{len(served.data)}")
                else:
                    self.send_response(200)
                if served.ranges:
                    self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(served.data) - start))
                self.send_header("Last-Modified", "Tue, 01 Dec 2026 10:00:00 GMT")
                self.end_headers()
                body = served.data[start:]
                if served.cut > 0:
                    served.cut -= 1
                    body = body[: len(body) // 2]
                    self.close_connection = True
                for at in range(0, len(body), served.chunk):
                    if served.pause_after is not None and at >= served.pause_after:
                        served.closing.wait()
                        return
                    try:
                        self.wfile.write(body[at : at + served.chunk])
                        self.wfile.flush()
                    except OSError:
                        return  # the client hung up (a cancel)
                    if served.delay:
                        served.closing.wait(served.delay)

            def log_message(self, *args) -> None:
                pass

        self.scheme = "https" if tls else "http"
        self.server = _serve(Handler, tls)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ServedFile:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


class Hostile(ServedFile):
    """A server that answers every request with one kind of harm until it is closed (``closing``):

    ``endless``: 200 and bytes without a Content-Length, ``limit`` of them (far more than a test lets a client take);
    ``huge``: the same after announcing a Content-Length of 1 TB;
    ``slow_headers``: a status line, then a header byte every 2 s;
    ``redirect``: 302 to ``location`` followed by the path asked.
    Once closed, a slow server finishes at once: a client that waited for it then gets the rest.
    ``requests`` records each request's path.
    """

    def __init__(self, kind: str, *, location: str = "", limit: int = 64 << 20, tls: Path | None = None) -> None:
        self.kind, self.location, self.limit = kind, location, limit
        self.closing = threading.Event()
        self.requests: list[str | None] = []
        hostile = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                hostile.requests.append(self.path)
                try:
                    getattr(self, hostile.kind)()
                except OSError:
                    pass  # the client hung up
                self.close_connection = True

            do_HEAD = do_GET  # noqa: N815

            def endless(self, announced: int | None = None) -> None:
                self.send_response(200)
                self.send_header("Connection", "close")
                if announced is not None:
                    self.send_header("Content-Length", str(announced))
                self.end_headers()
                block = b"\x7fELF" + bytes(1 << 16)
                for _sent in range(0, hostile.limit, len(block)):
                    self.wfile.write(block)

            def huge(self) -> None:
                self.endless(announced=1 << 40)

            def slow_headers(self) -> None:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"x" * 100_000:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if hostile.closing.wait(2):
                        return

            def redirect(self) -> None:
                self.send_response(302)
                self.send_header("Location", hostile.location + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.scheme = "https" if tls else "http"
        self.server = _serve(Handler, tls)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
