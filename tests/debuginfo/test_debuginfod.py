"""debuginfod: debug info and source by build-id from a real server, in elfutils' cache.

The server is Debian's ``debuginfod`` on loopback, indexing what the test gives it (debuginfod_servers.py):
the debug files of stripped programs, dwz's shared file, compressed debug info, and a tar archive
with the sources of a build whose source tree does not exist here. What cannot be made to
misbehave on cue (a body cut in the middle, a slow trickle) is a server of the test's own, and so
are the hostile ones: an endless body, a huge announced size, a body or headers a byte at a time,
a wrong build-id, a redirect elsewhere or down from https to http. Their limits are set small
through elfutils' variables (DEBUGINFOD_MAXSIZE, DEBUGINFOD_MAXTIME, DEBUGINFOD_TIMEOUT), so no
test waits for a default.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from debuginfo_helpers import perf_probe
from debuginfod_servers import DEBUGINFOD, Debuginfod, Hostile, ServedFile, self_signed, unused_port
from separate_builds import FLAGS, Builds, build_id, run, strip_to_debuglink

from kprobe_tui.debuginfo import debuginfod, locate
from kprobe_tui.debuginfo.debuginfod import Cancel, Cancelled, Client, Settings, source_names
from kprobe_tui.debuginfo.describe import format_points
from kprobe_tui.debuginfo.lines import LineSpec, find_line_range, render
from kprobe_tui.debuginfo.scope import PointSpec, open_debuginfo
from kprobe_tui.errors import UserError

pytestmark = pytest.mark.skipif(DEBUGINFOD is None, reason="debuginfod is not installed (apt-get install debuginfod)")


@dataclass(frozen=True)
class Served:
    """Stripped programs whose debug info (and, for ``mapped``, source) only the server has."""

    server: Debuginfod
    debuglink: Path
    dwz: Path
    zlib: Path
    mapped: Path
    mapped_full: Path  # the same build unstripped: perf's reference
    mapped_source: str  # the absolute path DWARF gives probed.c (it does not exist here)
    source_root: Path  # the sources under mapped_source's path, for perf -s


@pytest.fixture(scope="module")
def served(builds: Builds, tmp_path_factory) -> Served:
    """Everything a distribution would publish, indexed by a real debuginfod; the server always stops."""
    root = tmp_path_factory.mktemp("debuginfod")
    shelf, here = root / "served", root / "here"
    shelf.mkdir()
    here.mkdir()
    # a stripped program: its .gnu_debuglink names a file that is only on the server
    debuglink = here / "debuglink"
    strip_to_debuglink(builds.full, shelf / "prog.debug", debuglink)
    # dwz's shared file recorded at a path that does not exist here: found by its build-id
    dwz_dir = root / "dwz"
    dwz_dir.mkdir()
    # the same program under a build-id of its own: a server serves one debug file per build-id
    run("gcc", *FLAGS, "-I", "src", "src/probed.c", f"-Wl,--build-id=0x{uuid.uuid4().hex}", "-o", dwz_dir / "prog",
        cwd=builds.root)
    run("gcc", "-O0", "-g", "-I", "src", "src/probed.c", "-o", dwz_dir / "other", cwd=builds.root)
    run("dwz", "-m", shelf / "shared.dwz", "-M", f"/usr/lib/debug/.dwz/{root.name}/shared.debug",
        dwz_dir / "prog", dwz_dir / "other")
    dwz = here / "dwz"
    strip_to_debuglink(dwz_dir / "prog", shelf / "dwz-prog.debug", dwz)
    # compressed debug info, stripped
    zlib = here / "zlib"
    strip_to_debuglink(builds.zlib, shelf / "zlib.debug", zlib)
    # sources under /usr/src/debug/..., shipped in an archive with the debug file (as -dbgsym + source packages)
    mapped = here / "mapped"
    strip_to_debuglink(builds.mapped, root / "mapped.debug", mapped)
    with tarfile.open(shelf / "mapped.tar", "w") as archive:
        archive.add(root / "mapped.debug", "./usr/lib/debug/mapped.debug")
        for source in (builds.root / "src").iterdir():
            archive.add(source, f".{builds.mapped_prefix}/src/{source.name}")
    source_root = root / "perf-source"
    shutil.copytree(builds.root / "src", source_root / builds.mapped_prefix.lstrip("/") / "src")
    server = Debuginfod(shelf, root)
    try:
        server.start([build_id(p) for p in (debuglink, dwz, zlib, mapped, shelf / "shared.dwz")])
        yield Served(server, debuglink, dwz, zlib, mapped, builds.mapped, f"{builds.mapped_prefix}/src/probed.c",
                     source_root)
    finally:
        server.stop()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private debuginfod cache; no server unless the test names one."""
    path = tmp_path / "debuginfod-cache"
    monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(path))
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)
    monkeypatch.delenv("DEBUGINFOD_PROGRESS", raising=False)
    return path


def use(monkeypatch, *urls: str) -> None:
    monkeypatch.setenv("DEBUGINFOD_URLS", " ".join(urls))


def leftovers(cache: Path) -> list[str]:
    """Files in the cache other than complete ones: what an interrupted or cancelled transfer must not leave."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


def our_lines(binary, spec: str, **options) -> tuple[str, str | None]:
    info = open_debuginfo(binary=str(binary), **options)
    return render(info, find_line_range(info, LineSpec.parse(spec)))


def our_vars(binary, spec: str) -> str:
    info = open_debuginfo(binary=str(binary))
    parsed = PointSpec.parse(spec)
    return format_points(parsed, info.probe_points(parsed), verbose=False)


# ---- a real server --------------------------------------------------------------------


@pytest.mark.perf
@pytest.mark.parametrize("name", ["debuglink", "dwz", "zlib"])
def test_stripped_programs_get_their_debug_info_from_the_server(served, expected, cache, monkeypatch, name):
    """No DWARF on disk (for dwz, not its shared file either): lines and vars as perf on the unstripped build."""
    binary = getattr(served, name)
    assert not locate.ElfSections(binary).has_dwarf
    with pytest.raises(UserError) as offline:
        open_debuginfo(binary=str(binary))
    assert "DEBUGINFOD_URLS" in offline.value.hint
    use(monkeypatch, served.server.url)
    located = open_debuginfo(binary=str(binary)).located
    assert located.debug_file == cache / build_id(binary) / "debuginfo" and "downloaded" in located.note
    if name == "dwz":
        assert located.supplementary.parent.parent == cache and located.supplementary.name == "debuginfo"
    assert oct(located.debug_file.stat().st_mode & 0o777) == "0o400"  # as elfutils leaves them
    for spec, text in expected.lines.items():
        assert our_lines(binary, spec)[0] == text, spec
    for spec, text in expected.vars.items():
        if text is not None:
            assert our_vars(binary, spec) == text, spec


def test_source_text_comes_from_the_server_when_the_tree_is_absent(served, cache, monkeypatch, perf):
    """DWARF names /usr/src/debug/...: not here, so the text comes from the server's archive (no -s needed)."""
    assert not Path(served.mapped_source).exists()
    expected = perf_probe("-s", str(served.source_root), "-x", str(served.mapped_full), "-L", "describe").stdout
    use(monkeypatch, served.server.url)
    text, note = our_lines(served.mapped, "describe")
    header, *body = text.splitlines(keepends=True)
    assert body == expected.splitlines(keepends=True)[1:] and len(body) > 5 and note is None
    directory = cache / build_id(served.mapped)
    entry = next(directory / name for name in source_names(served.mapped_source) if (directory / name).exists())
    assert header == f"<describe@{entry}:0>\n"  # perf prints the file it read, so do we


def test_debuginfod_find_and_perf_reuse_what_we_fetched(served, expected, cache, monkeypatch, perf):
    """Same cache, same names: elfutils' tools find our files without asking a server (none answers)."""
    use(monkeypatch, served.server.url)
    info = open_debuginfo(binary=str(served.mapped))
    source = Path(render(info, find_line_range(info, LineSpec.parse("describe")))[0].splitlines()[0][10:-3])
    identity = build_id(served.mapped)
    open_debuginfo(binary=str(served.debuglink))  # for perf, below
    use(monkeypatch, f"http://127.0.0.1:{unused_port()}")  # nobody there: only the cache can answer
    env = dict(os.environ)
    found = subprocess.run(["debuginfod-find", "debuginfo", identity], capture_output=True, text=True, env=env)
    assert found.stdout.strip() == str(info.located.debug_file), found.stderr
    found = subprocess.run(["debuginfod-find", "source", identity, served.mapped_source], capture_output=True, text=True, env=env)
    assert found.stdout.strip() == str(source), found.stderr
    # perf (libdw) finds a stripped program's debug file there too
    assert subprocess.run(["perf", "probe", "-x", str(served.debuglink), "-V", "describe"], capture_output=True,
                          text=True, env=dict(os.environ)).stdout == expected.vars["describe"]


def test_we_reuse_what_debuginfod_find_fetched(served, cache, monkeypatch):
    identity = build_id(served.mapped)
    use(monkeypatch, served.server.url)
    for query in (["debuginfo", identity], ["source", identity, served.mapped_source]):
        subprocess.run(["debuginfod-find", *query], capture_output=True, check=True, env=dict(os.environ))
    use(monkeypatch, f"http://127.0.0.1:{unused_port()}")
    client = Client()
    text, note = our_lines(served.mapped, "describe", debuginfod=client)
    assert client.downloads == [] and note is None and "describe(const struct shape *s" in text


def test_a_build_id_no_server_has_is_named_with_each_url(served, cache, monkeypatch, tmp_path):
    """404 from the real server, refused connection from a port nobody listens on: both named, with the build-id."""
    binary, debug = tmp_path / "prog", tmp_path / "prog.debug"
    subprocess.run(["gcc", "-g", "-o", str(binary), "-x", "c", "-"], input=b"int main(void){return 0;}\n", check=True)
    strip_to_debuglink(binary, debug, tmp_path / "stripped")
    debug.unlink()
    dead = f"http://127.0.0.1:{unused_port()}"
    use(monkeypatch, served.server.url, dead)
    with pytest.raises(UserError) as error:
        open_debuginfo(binary=str(tmp_path / "stripped"))
    identity = build_id(binary)
    message = error.value.message
    assert f"{served.server.url}/buildid/{identity}/debuginfo: not found (404)" in message
    assert f"{dead}/buildid/{identity}/debuginfo: connection refused" in message
    assert leftovers(cache) == []  # not every server said 404: no "not found" mark
    use(monkeypatch, served.server.url)
    with pytest.raises(UserError):
        open_debuginfo(binary=str(tmp_path / "stripped"))
    assert leftovers(cache) == [f"{identity}/debuginfo"] and (cache / identity / "debuginfo").stat().st_size == 0
    with pytest.raises(UserError) as remembered:  # elfutils' mark: not asked again for cache_miss_s
        Client().debuginfo(identity)
    assert "delete" in remembered.value.hint and str(cache / identity / "debuginfo") in remembered.value.hint


# ---- a server of the test's own: cut, slow, wrong --------------------------------------


@pytest.fixture
def payload(builds) -> tuple[bytes, str]:
    """A debug file (about 50 KB) and its build-id, as a server would send it."""
    return builds.full.read_bytes(), build_id(builds.full)


def test_nothing_is_asked_without_debuginfod_urls(payload, cache):
    data, identity = payload
    with ServedFile(data, identity) as server:
        with pytest.raises(UserError) as error:
            Client().debuginfo(identity)
        assert server.requests == []
    assert "DEBUGINFOD_URLS" in error.value.message and "https://debuginfod.debian.net" in error.value.hint
    assert not cache.exists()


def test_an_interrupted_transfer_restarts_and_keeps_only_the_whole_file(payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(data, identity, cut=1) as server:
        use(monkeypatch, server.url)
        path = Client().debuginfo(identity)
    assert server.requests == [None, None] and path.read_bytes() == data
    assert leftovers(cache) == [f"{identity}/debuginfo"]


def test_an_interrupted_transfer_resumes_where_it_broke_when_the_server_takes_ranges(payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(data, identity, cut=1, ranges=True) as server:
        use(monkeypatch, server.url)
        path = Client().debuginfo(identity)
    assert server.requests == [None, f"bytes={len(data) // 2}-"] and path.read_bytes() == data


def test_a_transfer_that_always_breaks_leaves_the_cache_clean(payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(data, identity, cut=99) as server:
        use(monkeypatch, server.url)
        with pytest.raises(UserError) as error:
            Client().debuginfo(identity)
    assert len(server.requests) == 1 + Settings.from_environment().retries
    assert f"{server.url}/buildid/{identity}/debuginfo" in error.value.message and "broke off" in error.value.message
    assert leftovers(cache) == []


def test_a_file_with_another_build_id_is_not_kept(builds, payload, cache, monkeypatch):
    _data, identity = payload
    with ServedFile(builds.zlib.read_bytes(), identity) as server:  # a valid ELF, but another build
        use(monkeypatch, server.url)
        with pytest.raises(UserError) as error:
            Client().debuginfo(identity)
    assert f"build-id {build_id(builds.zlib)}, not {identity}" in error.value.message
    assert leftovers(cache) == []


def test_cancel_stops_a_stalled_transfer_at_once_and_keeps_nothing(payload, cache, monkeypatch):
    """Escape in the TUI: set from another thread while the download waits for a server that sends a
    chunk every 30 s. The wait is cut short (the socket is shut down), not sat out."""
    data, identity = payload
    cancel = Cancel()
    reports = []

    def progress(report):
        if not reports:
            threading.Timer(0.3, cancel.set).start()
        reports.append(report)

    with ServedFile(data * 20, identity, delay=30) as server:
        use(monkeypatch, server.url)
        started = time.monotonic()
        with pytest.raises(Cancelled):
            Client(progress=progress, cancel=cancel).debuginfo(identity)
        waited = time.monotonic() - started
    assert waited < 30, "the download sat out the server's pause instead of stopping"
    assert reports[0].total == len(data) * 20 and reports[-1].done < reports[-1].total
    assert leftovers(cache) == []


def test_ctrl_c_on_the_cli_keeps_nothing(builds, payload, cache, monkeypatch, tmp_path):
    """DEBUGINFOD_PROGRESS shows progress on a pipe; SIGINT once it does: status 130, no partial file."""
    data, identity = payload
    stripped = tmp_path / "prog"
    run("objcopy", "--strip-debug", builds.full, stripped)
    with ServedFile(data * 20, identity, delay=1.0) as server:
        use(monkeypatch, server.url)
        monkeypatch.setenv("DEBUGINFOD_PROGRESS", "1")
        cli = subprocess.Popen([sys.executable, "-m", "kprobe_tui", "vars", "-x", str(stripped), "describe"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = cli.stderr.readline()
        cli.send_signal(signal.SIGINT)
        status = cli.wait(timeout=30)
    assert first.startswith("kprobe-tui: downloading ") and "/s" in first and status == 130
    assert first.rstrip().endswith(f"debug info of build-id {identity} from 127.0.0.1:{server.url.rsplit(':', 1)[1]}")
    assert leftovers(cache) == []


def test_progress_reports_bytes_total_and_rate(payload, cache, monkeypatch):
    data, identity = payload
    reports = []
    with ServedFile(data, identity) as server:
        use(monkeypatch, server.url)
        Client(progress=reports.append).debuginfo(identity)
    last = reports[-1]
    assert last.finished and last.done == last.total == len(data) and last.rate > 0
    assert last.url == f"{server.url}/buildid/{identity}/debuginfo" and identity in last.what


def test_source_names_are_elfutils_spellings():
    modern, legacy = source_names("/usr/src/debug/a#b/x.c")
    assert legacy == "source##usr##src##debug##a#_b##x.c"  # elfutils 0.188-0.191 (checked against debuginfod-find above)
    assert modern.startswith("source-") and modern.endswith("-#usr#src#debug#a#b#x.c") and len(modern) == 7 + 9 + 22
    long = "/" + "d" * 300 + "/file.c"
    assert source_names(long)[0].endswith("d" * 110 + "/file.c".replace("/", "#")) and len(source_names(long)[0]) == 7 + 9 + 117


def test_doctor_asks_each_server_for_a_build_id_without_downloading_it(served, cache, monkeypatch):
    """The real server refuses HEAD (elfutils 0.188): the GET's body is not read, nothing lands in the cache."""
    dead = f"http://127.0.0.1:{unused_port()}"
    use(monkeypatch, served.server.url, dead)
    identity = build_id(served.debuglink)
    report = "\n".join(debuginfod.setup_report(Client(), identity))
    assert f"servers (DEBUGINFOD_URLS)            {served.server.url} {dead}" in report
    size = (served.server.served / "prog.debug").stat().st_size
    assert f"served ({debuginfod.human_size(size)}) at {served.server.url}/buildid/{identity}/debuginfo" in report
    assert f"unreachable (connection refused) at {dead}/buildid/{identity}/debuginfo" in report
    assert "not served (404)" in "\n".join(debuginfod.setup_report(Client(), "00" * 20))
    assert leftovers(cache) == []


def test_doctor_without_debuginfod_urls_asks_nobody_and_says_how_to_set_it(payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(data, identity) as server:
        result = subprocess.run([sys.executable, "-m", "kprobe_tui", "doctor"], capture_output=True, text=True,
                                env=dict(os.environ))
        assert server.requests == []
    section = result.stdout.split("Debug info from debuginfod\n", 1)[1]
    assert "[--] servers (DEBUGINFOD_URLS)            not set: no server is asked" in section
    assert "https://debuginfod.debian.net" in section and str(cache) in section


@contextlib.contextmanager
def hang_guard(*servers, seconds: float = 30):
    """The client before these fixes waited for these servers forever: after ``seconds`` they are closed (a slow one
    then finishes at once), so a regression fails its test instead of hanging the suite."""
    timer = threading.Timer(seconds, lambda: [server.closing.set() for server in servers])
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def fails(monkeypatch, *urls: str, source: str | None = None, identity: str = "ab" * 20) -> str:
    """The message of the UserError fetching ``identity``'s debug info (or ``source``) from ``urls``."""
    use(monkeypatch, *urls)
    with pytest.raises(UserError) as error:
        if source is None:
            Client().debuginfo(identity)
        else:
            Client().source(identity, source)
    return error.value.message


# ---- a hostile server, size: DEBUGINFOD_MAXSIZE ----------------------------------------------------------------


def test_an_announced_size_above_the_default_cap_is_refused_before_reading(cache, monkeypatch):
    """1 TB announced, DEBUGINFOD_MAXSIZE unset: refused on the headers, nothing written."""
    with Hostile("huge") as server:
        message = fails(monkeypatch, server.url)
    assert f"{server.url}/buildid/" in message and "announced 1099.5 GB" in message and "DEBUGINFOD_MAXSIZE" in message
    assert server.requests == [f"/buildid/{'ab' * 20}/debuginfo"] and leftovers(cache) == []


@pytest.mark.parametrize("source", [None, "/usr/src/debug/endless.c"])
def test_an_endless_body_stops_at_debuginfod_maxsize(cache, monkeypatch, source):
    """No Content-Length and no end: stopped past DEBUGINFOD_MAXSIZE (1 MB here), not retried, nothing kept."""
    monkeypatch.setenv("DEBUGINFOD_MAXSIZE", str(1 << 20))
    with Hostile("endless") as server:
        message = fails(monkeypatch, server.url, source=source)
    assert "sent more than DEBUGINFOD_MAXSIZE (1.0 MB)" in message and len(server.requests) == 1
    assert leftovers(cache) == []


def test_the_real_server_is_told_debuginfod_maxsize(builds, cache, monkeypatch, tmp_path):
    """elfutils sends X-DEBUGINFOD-MAXSIZE; Debian's debuginfod answers 406 for a larger file, and we say why."""
    shelf = tmp_path / "served"
    shelf.mkdir()
    shutil.copy(builds.full, shelf / "prog")
    identity = build_id(builds.full)
    with Debuginfod(shelf, tmp_path).start([identity]) as server:
        monkeypatch.setenv("DEBUGINFOD_MAXSIZE", "1000")
        message = fails(monkeypatch, server.url, identity=identity)
    assert f"{server.url}/buildid/{identity}/debuginfo: larger than DEBUGINFOD_MAXSIZE (1.0 kB)" in message


def test_a_full_disk_is_not_retried_and_no_other_server_is_asked(payload, tmp_path, monkeypatch):
    """ENOSPC on a 256 KB tmpfs: our disk, not the server's fault: one request, the next server never asked."""
    data, identity = payload
    small = tmp_path / "small"
    small.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        monkeypatch.setenv("DEBUGINFOD_CACHE_PATH", str(small / "cache"))
        with ServedFile(data * 20, identity) as first, ServedFile(data, identity) as second:
            message = fails(monkeypatch, first.url, second.url, identity=identity)
        assert f"cannot write the debug info of build-id {identity} into the debuginfod cache {small / 'cache'}" in message
        assert "no space left on device" in message
        assert first.requests == [None] and second.requests == [] and leftovers(small / "cache") == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


# ---- time: DEBUGINFOD_MAXTIME, DEBUGINFOD_TIMEOUT -------------------------------------------


def test_a_body_a_byte_a_second_stops_at_debuginfod_maxtime(payload, cache, monkeypatch):
    """DEBUGINFOD_TIMEOUT=5 never fires (a byte comes every second): DEBUGINFOD_MAXTIME=2 ends it, named."""
    data, identity = payload
    monkeypatch.setenv("DEBUGINFOD_TIMEOUT", "5")
    monkeypatch.setenv("DEBUGINFOD_MAXTIME", "2")
    with ServedFile(data, identity, chunk=1, delay=1.0) as server, hang_guard(server):
        message = fails(monkeypatch, server.url, identity=identity)
    assert f"{server.url}/buildid/{identity}/debuginfo: took longer than DEBUGINFOD_MAXTIME (2 s)" in message
    assert f"of {len(data)} bytes arrived" in message and leftovers(cache) == []


def test_headers_a_byte_every_two_seconds_stop_at_debuginfod_timeout(cache, monkeypatch):
    """The answer must be under way within DEBUGINFOD_TIMEOUT: here 3 s, though each byte comes within 2 s."""
    monkeypatch.setenv("DEBUGINFOD_TIMEOUT", "3")
    with Hostile("slow_headers") as server, hang_guard(server):
        message = fails(monkeypatch, server.url)
    assert f"{server.url}/buildid/{'ab' * 20}/debuginfo: no answer within DEBUGINFOD_TIMEOUT (3 s)" in message


def test_doctor_gives_up_on_slow_headers(cache, monkeypatch):
    """doctor's HEAD request has the same deadline: the report comes, and names the server and the variable."""
    monkeypatch.setenv("DEBUGINFOD_TIMEOUT", "3")
    with Hostile("slow_headers") as server, hang_guard(server):
        use(monkeypatch, server.url)
        report = "\n".join(debuginfod.setup_report(Client(), "ab" * 20))
    assert f"no answer within DEBUGINFOD_TIMEOUT (3 s) at {server.url}/buildid/{'ab' * 20}/debuginfo" in report


# ---- several servers, redirects ------------------------------------------------------------


def test_a_wrong_build_id_from_one_server_does_not_stop_the_search(builds, payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(builds.zlib.read_bytes(), identity) as wrong, ServedFile(data, identity) as right:
        use(monkeypatch, wrong.url, right.url)
        client = Client()
        path = client.debuginfo(identity)
    assert path.read_bytes() == data and client.downloads[-1][0] == f"{right.url}/buildid/{identity}/debuginfo"


def test_when_every_server_fails_each_is_named_with_what_it_did(builds, payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(builds.zlib.read_bytes(), identity) as wrong, ServedFile(data, "cd" * 20) as other:
        message = fails(monkeypatch, wrong.url, other.url, identity=identity)
    assert f"{wrong.url}/buildid/{identity}/debuginfo: sent a file with build-id {build_id(builds.zlib)}" in message
    assert f"{other.url}/buildid/{identity}/debuginfo: not found (404)" in message and leftovers(cache) == []


def test_the_note_names_the_server_a_redirect_led_to(builds, payload, cache, monkeypatch, tmp_path):
    data, identity = payload
    stripped = tmp_path / "prog"
    run("objcopy", "--strip-debug", builds.full, stripped)
    with ServedFile(data, identity) as served, Hostile("redirect", location=served.url) as redirect:
        use(monkeypatch, redirect.url)
        note = open_debuginfo(binary=str(stripped)).located.note
    assert note.startswith(f"downloaded {served.url}/buildid/{identity}/debuginfo (") and redirect.url not in note


@pytest.fixture
def certificate(tmp_path, monkeypatch) -> Path:
    pem = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    return pem


def test_a_redirect_from_https_down_to_http_is_refused(payload, cache, monkeypatch, certificate):
    data, identity = payload
    with ServedFile(data, identity) as plain, Hostile("redirect", location=plain.url, tls=certificate) as secure:
        message = fails(monkeypatch, secure.url, identity=identity)
    assert f"{secure.url}/buildid/{identity}/debuginfo: redirected to {plain.url}/buildid/" in message
    assert "refused: from https down to http" in message and plain.requests == [] and leftovers(cache) == []


def test_a_redirect_from_http_up_to_https_is_followed(payload, cache, monkeypatch, certificate):
    data, identity = payload
    with ServedFile(data, identity, tls=certificate) as secure, Hostile("redirect", location=secure.url) as plain:
        use(monkeypatch, plain.url)
        client = Client()
        assert client.debuginfo(identity).read_bytes() == data
    assert client.downloads[-1][0] == f"{secure.url}/buildid/{identity}/debuginfo"


# ---- the cache ---------------------------------------------------------------------------------


def test_a_cache_of_another_user_is_refused(payload, cache, monkeypatch):
    """root with a user's environment (sudo -E): that user's cache is not written, nor read."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the cache to another user")
    data, identity = payload
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    with ServedFile(data, identity) as server:
        use(monkeypatch, server.url)
        with pytest.raises(UserError) as error:
            Client().debuginfo(identity)
        assert Client().cached(identity) is None and server.requests == []
    assert f"the debuginfod cache {cache} belongs to uid 65534" in error.value.message
    assert "DEBUGINFOD_CACHE_PATH" in error.value.hint and "sudo" in error.value.hint and leftovers(cache) == []


def test_what_the_cache_holds_is_private(payload, cache, monkeypatch):
    data, identity = payload
    with ServedFile(data, identity) as server:
        use(monkeypatch, server.url)
        path = Client().debuginfo(identity)
    modes = [oct(os.stat(p).st_mode & 0o777) for p in (cache, path.parent, path)]
    assert modes == ["0o700", "0o700", "0o400"]


def test_a_symlink_planted_in_the_cache_is_not_followed(builds, payload, cache, monkeypatch):
    """``<build-id>/debuginfo`` a symlink to a file of the same build-id: not trusted, replaced by a download."""
    data, identity = payload
    (cache / identity).mkdir(parents=True, mode=0o700)
    (cache / identity / "debuginfo").symlink_to(builds.full)
    with ServedFile(data, identity) as server:
        use(monkeypatch, server.url)
        path = Client().debuginfo(identity)
    assert server.requests == [None] and not path.is_symlink() and path.read_bytes() == data


def test_a_symlinked_build_id_directory_is_refused(payload, cache, monkeypatch, tmp_path):
    data, identity = payload
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache.mkdir(mode=0o700)
    (cache / identity).symlink_to(elsewhere)
    with ServedFile(data, identity) as server:
        message = fails(monkeypatch, server.url, identity=identity)
    assert f"{cache / identity} is a symlink" in message and list(elsewhere.iterdir()) == []


def test_a_cached_file_with_another_build_id_is_fetched_again(builds, payload, cache, monkeypatch):
    data, identity = payload
    (cache / identity).mkdir(parents=True, mode=0o700)
    (cache / identity / "debuginfo").write_bytes(builds.zlib.read_bytes())
    assert Client().cached(identity) is None
    with ServedFile(data, identity) as server:
        use(monkeypatch, server.url)
        path = Client().debuginfo(identity)
    assert server.requests == [None] and path.read_bytes() == data
