"""Snapshot archives as files: written atomically and privately, read as untrusted input.

Archives here are built from the real Debian 6.1 snapshot (tests/fixtures/snapshots) with one thing
made hostile at a time; the CLI runs them in a child, as a user would, under Debian's Python.
"""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest

from kprobe_tui.errors import UserError
from kprobe_tui.files import MiB
from kprobe_tui.kernel import snapshot
from kprobe_tui.kernel.snapshot import open_snapshot, unpack

FIXTURE = Path(__file__).parents[1] / "fixtures" / "snapshots" / "debian-6.1.tar.gz"


def fixture_members() -> dict[str, bytes]:
    with tarfile.open(FIXTURE) as archive:
        return {member.name: archive.extractfile(member).read() for member in archive if member.isfile()}


def archive_of(path: Path, members: dict[str, bytes], extra=()) -> Path:
    """A .tar.gz of ``members`` (regular files) and ``extra`` TarInfo entries (links, devices...)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info, data in extra:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def cli(*args: str, env: dict | None = None, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kprobe_tui", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, preexec_fn=preexec)


def assert_corrupt(result: subprocess.CompletedProcess, archive: Path, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert f"snapshot {archive} is corrupt: " in result.stderr and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def temporary_dirs(tmpdir: Path) -> list[str]:
    return [name for name in os.listdir(tmpdir) if name.startswith("kprobe-tui-snapshot-")]


# --- reading -----------------------------------------------------------------------------------


def test_the_real_snapshot_opens_on_debian_python(tmp_path):
    """Python 3.11.2 (Debian 12, what README's install gives) has no extractall(filter=): every snapshot failed."""
    assert sys.version_info[:3] >= (3, 11, 0)
    result = cli("--snapshot", str(FIXTURE), "funcs", "vfs_read", env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "vfs_read" in result.stdout.split()
    assert temporary_dirs(tmp_path) == []  # removed at exit


@pytest.mark.parametrize("manifest, words", [
    (b"[1,2,3]", ["manifest.json holds a list, not an object"]),
    (b'{"release": 5, "captured": "x", "missing": []}', ["'release' is a int, not a str"]),
    (b'{"release": "6.1", "missing": []}', ["'captured' is missing"]),
    (b'{"release": "6.1", "captured": "x", "missing": [1]}', ["'missing' holds something other than strings"]),
    (b'{"release": "6.1", ', ["manifest.json is not JSON"]),
    (b'\xff\xfe{}', ["manifest.json is not JSON"]),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, ["manifest.json is nested deeper than Python's JSON reader can"],
                 id="nested-lists"),
    pytest.param(b'{"a":' * 100_000 + b"1" + b"}" * 100_000, ["manifest.json is nested deeper"], id="nested-objects"),
    pytest.param(b'{"release": ' + b"9" * 5000 + b', "captured": "x", "missing": []}', ["manifest.json is not JSON"],
                 id="5000-digits"),
    (b'{"release": 1e999, "captured": "x", "missing": []}', ["'release' is a float, not a str"]),
])
def test_a_malformed_manifest_is_a_clear_error(tmp_path, manifest, words):
    members = fixture_members()
    members["manifest.json"] = manifest
    archive = archive_of(tmp_path / "bad.tar.gz", members)
    assert_corrupt(cli("--snapshot", str(archive), "funcs", "vfs_read"), archive, *words)


def test_non_utf8_kallsyms_is_a_clear_error(tmp_path):
    members = fixture_members()
    members["proc/kallsyms"] = members["proc/kallsyms"][:1000] + b"ffffffff81000000 T caf\xe9\n"
    archive = archive_of(tmp_path / "bad.tar.gz", members)
    assert_corrupt(cli("--snapshot", str(archive), "doctor"), archive, "proc/kallsyms is not text")


def link(name: str, target: str, kind=tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def device(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 5  # /dev/zero
    return info, None


@pytest.mark.parametrize("extra, words", [
    ([link("proc/kallsyms", "/etc/shadow")], ["'proc/kallsyms' is not a regular file"]),
    ([link("btf/vmlinux", "../../../../etc/passwd", tarfile.LNKTYPE)], ["'btf/vmlinux' is not a regular file"]),
    ([device("tracefs/README")], ["'tracefs/README' is not a regular file"]),
])
def test_links_and_devices_are_refused(tmp_path, extra, words):
    members = fixture_members()
    for info, _ in extra:
        members.pop(info.name)
    archive = archive_of(tmp_path / "bad.tar.gz", members, extra)
    assert_corrupt(cli("--snapshot", str(archive), "funcs", "vfs_read", env={"TMPDIR": str(tmp_path)}), archive, *words)
    assert temporary_dirs(tmp_path) == []  # nothing left when opening failed


def test_paths_of_its_own_are_never_written(tmp_path):
    """Absolute names and .. are not members a reader uses: skipped, not extracted anywhere."""
    members = fixture_members()
    outside = tmp_path / "outside"
    members[str(outside)] = b"absolute"
    members["../../../../../../" + str(tmp_path / "escaped").lstrip("/")] = b"dot-dot"
    members["btf/../../escaped2"] = b"through an allowed directory"
    root = tmp_path / "root"
    root.mkdir()
    with open(archive_of(tmp_path / "odd.tar.gz", members), "rb") as stream:
        unpack(stream, root)
    assert not outside.exists() and not (tmp_path / "escaped").exists() and not (tmp_path / "escaped2").exists()
    written = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    assert written == sorted(name for name in fixture_members())
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in root.rglob("*") if path.is_file())


def test_btf_names_no_module_has_are_skipped(tmp_path):
    """A module's BTF is named as the module: a name of 300 bytes (more than a filesystem takes: ENAMETOOLONG
    was an internal error), or of controls and odd bytes, is no module's and is never unpacked."""
    members = fixture_members()
    hostile = ["btf/" + "a" * 300, "btf/\x1b]0;title\x07\n", "btf/caf\udce9", "btf/...", "btf/a.b"]
    archive = archive_of(tmp_path / "odd.tar.gz", {**members, **dict.fromkeys(hostile, b"\x9f\xeb")})
    result = cli("--snapshot", str(archive), "funcs", "vfs_read")
    assert result.returncode == 0 and "vfs_read" in result.stdout.split(), result.stderr
    root = tmp_path / "root"
    root.mkdir()
    with open(archive, "rb") as stream:
        unpack(stream, root)
    assert sorted(path.name for path in (root / "btf").iterdir()) == sorted(n[4:] for n in members if n.startswith("btf/"))


def zero_member_archive(path: Path, name: str, size: int, copies: int = 1) -> Path:
    """A .tar.gz whose members are ``size`` zero bytes each: ~1000x smaller than what it expands to."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    with open(path, "wb") as out:
        for index in range(copies):
            info = tarfile.TarInfo(name if copies == 1 else f"{name}{index}")
            info.size = size
            out.write(compressor.compress(info.tobuf(format=tarfile.GNU_FORMAT)))
            chunk = bytes(MiB)
            for _ in range(size // MiB):
                out.write(compressor.compress(chunk))
            out.write(compressor.compress(bytes(size % MiB + (-size) % 512)))
        out.write(compressor.compress(bytes(1024)) + compressor.flush())
    return path


def test_a_member_that_expands_beyond_the_bound_is_refused(tmp_path):
    archive = zero_member_archive(tmp_path / "bomb.tar.gz", "proc/kallsyms", snapshot.MAX_MEMBER + MiB)
    assert archive.stat().st_size < MiB
    assert_corrupt(cli("--snapshot", str(archive), "funcs"), archive, "'proc/kallsyms' is larger than 64 MiB")


def test_the_total_and_skipped_members_are_bounded_too(tmp_path):
    """Names nobody reads are skipped, but reading past them still counts: a stream of them ends at the bound."""
    archive = zero_member_archive(tmp_path / "bomb.tar.gz", "unused/", 60 * MiB, copies=5)
    assert_corrupt(cli("--snapshot", str(archive), "funcs"), archive, "it unpacks to more than 256 MiB")


def test_member_count_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_MEMBERS", 50)
    archive = archive_of(tmp_path / "many.tar.gz", {f"unused/{n}": b"" for n in range(60)})
    with pytest.raises(UserError, match="is corrupt: more than 50 members"):
        open_snapshot(archive)


# --- writing -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> list[str]:
    """--tracefs/--kallsyms/--btf flags on the unpacked fixture: `snapshot` without a live kernel."""
    root = tmp_path_factory.mktemp("unpacked")
    with open(FIXTURE, "rb") as stream:
        unpack(stream, root)
    return ["--tracefs", str(root / "tracefs"), "--debugfs", str(root / "debugfs"),
            "--kallsyms", str(root / "proc" / "kallsyms"), "--btf", str(root / "btf" / "vmlinux")]


def test_snapshot_is_private_and_never_replaces_a_file_unasked(tmp_path, offline):
    out = tmp_path / "kernel.tar.gz"
    made = cli(*offline, "snapshot", str(out))
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600  # it holds the kernel's real addresses
    assert "mode 0600" in made.stdout
    first = out.read_bytes()
    again = cli(*offline, "snapshot", str(out))
    assert again.returncode == 2 and f"snapshot {out}: already exists" in again.stderr and "--force" in again.stderr
    assert out.read_bytes() == first
    forced = cli(*offline, "snapshot", "--force", str(out))
    assert forced.returncode == 0, forced.stderr
    assert [name for name in os.listdir(tmp_path) if name.endswith(".part")] == []
    assert "0600" in cli("snapshot", "--help").stdout


@pytest.mark.parametrize("force", [False, True])
def test_snapshot_never_writes_through_a_symlink(tmp_path, offline, force):
    target = tmp_path / "precious"
    target.write_text("keep me")
    out = tmp_path / "kernel.tar.gz"
    out.symlink_to(target)
    made = cli(*offline, "snapshot", *(["--force"] if force else []), str(out))
    assert made.returncode == 2 and "is a symbolic link" in made.stderr, made.stderr
    assert target.read_text() == "keep me" and out.is_symlink()


def test_a_full_disk_leaves_the_old_archive_intact(tmp_path, offline):
    """The write fails past 256 KiB (RLIMIT_FSIZE; Python ignores SIGXFSZ, so it is EFBIG): the old
    archive stays whole and no temporary file is left."""
    out = tmp_path / "kernel.tar.gz"
    out.write_bytes(b"the old, good archive")

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    failed = cli(*offline, "snapshot", "--force", str(out), preexec=small_disk)
    assert failed.returncode == 2 and f"cannot write {out}" in failed.stderr and "Traceback" not in failed.stderr
    assert out.read_bytes() == b"the old, good archive"
    assert sorted(os.listdir(tmp_path)) == ["kernel.tar.gz"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_leaves_no_unpacked_copy(tmp_path, signum):
    """The unpacked copy (~11 MB) is removed by the undo that removes probes on SIGTERM and SIGHUP too."""
    opener = ("import sys, time\nfrom pathlib import Path\nfrom kprobe_tui.kernel.snapshot import open_snapshot\n"
              "open_snapshot(Path(sys.argv[1]))\nprint('open', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", opener, str(FIXTURE)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    assert child.stdout.readline() == "open\n"
    assert len(temporary_dirs(tmp_path)) == 1
    child.send_signal(signum)
    assert child.wait(timeout=30) == -signum  # it still dies of the signal, after cleaning up
    assert temporary_dirs(tmp_path) == []


def test_manifest_strings_reach_the_terminal_escaped(tmp_path):
    """The release and what was missing, as `doctor` prints them, from someone else's archive."""
    members = fixture_members()
    escapes = "\x1b]0;title\x07\x1b[2J"
    manifest = json.loads(members["manifest.json"])
    manifest["release"] = f"6.1{escapes}"
    manifest["missing"] = [f"btf/x: {escapes}"]
    members["manifest.json"] = json.dumps(manifest).encode()
    archive = archive_of(tmp_path / "odd.tar.gz", members)
    result = cli("--snapshot", str(archive), "doctor")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "6.1\\x1b]0;title\\x07\\x1b[2J" in result.stdout and "btf/x: \\x1b]0;title" in result.stdout
