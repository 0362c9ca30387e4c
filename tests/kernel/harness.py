"""Boot Debian's 6.1 and 6.12 kernels under QEMU on the host's own root filesystem and run a command inside.

This machine's kernel has no kprobes, so the kernel half of kprobe-tui is tested in guests:

* kernels come from Debian's packages (``apt-get download`` + ``dpkg-deb -x``: no install, no boot-loader
  hooks) and only what a boot needs is kept under ``/var/cache/kprobe-tui/kernels/<version>/``;
* a small initramfs (static busybox + the 9p/virtio modules, which Debian builds as modules) mounts the
  host's ``/`` read-only over virtio-9p, a tmpfs on ``/tmp`` and the project directory read-write, then
  runs the command with the host's Python and prints its exit status on the serial console.

Why QEMU directly and not virtme-ng: virtme-ng needs udev's binaries on the host and
``--disable-kvm --force-9p`` here, and boots in ~12 s against ~3.5 s for this direct boot. There is no
usable nested KVM, so QEMU runs in software emulation (TCG). The 6.1 bzImage carries an xz payload,
which Python decompresses to the ELF ``vmlinux`` that QEMU boots directly (PVH), skipping the slow
in-guest decompression; the 6.12 payload is zstd (no stdlib decompressor), so its bzImage boots as is.

Command line (also used to (re)capture the snapshot fixtures)::

    python tests/kernel/harness.py run [--timeout S] debian-6.12 [-- PYTEST ARGS]  # default: -m kernel tests/kernel
    python tests/kernel/harness.py shell [--timeout S] debian-6.1 -- CMD ARGS...    # any command, in the project dir
    python tests/kernel/harness.py snapshots                # recapture tests/fixtures/snapshots/<kernel>.tar.gz

The kernel cache moves with ``KPROBE_TUI_KERNEL_CACHE``; delete a version's directory to refetch it.
"""

from __future__ import annotations

import argparse
import compileall
import fcntl
import lzma
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

PROJECT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("KPROBE_TUI_KERNEL_CACHE", "/var/cache/kprobe-tui/kernels"))
SNAPSHOTS = PROJECT / "tests" / "fixtures" / "snapshots"
BUSYBOX = Path("/bin/busybox")
QEMU = "qemu-system-x86_64"
# The guest prints this line last; the harness reads the command's exit status from it.
EXIT_MARKER = "KPTUI-GUEST-EXIT:"
EXIT_STATUS = re.compile(re.escape(EXIT_MARKER) + r" (\d+)$")
# Set inside the guest so the host-side tests know not to boot guests from a guest.
IN_GUEST_ENV = "KPROBE_TUI_IN_GUEST"
# The in-guest tests take 1.5-2.5 minutes per kernel under TCG on an idle 2-core machine, and 2-3 more
# since the aggregation tests (test_aggregate_guest.py: 2.2 minutes on 6.12). The kill timeout leaves
# room for a loaded machine: with other test runs and a benchmark beside it, the 6.12 guest took 400 s
# before those tests, and 360 s killed it. A hung guest then holds CI for 15 minutes at most.
DEFAULT_TIMEOUT = 1800  # the guest suite took 8-20 min per kernel here (TCG, the host busy with other tests): 15 was too short
DEFAULT_SELECTION = ["-m", "kernel", "tests/kernel"]
# 9p, its virtio transport, the virtio PCI bus and a virtio RNG (so getrandom() never waits for entropy).
GUEST_MODULES = ["9p", "9pnet_virtio", "virtio_pci", "virtio_rng"]
XZ_MAGIC = b"\xfd7zXZ\x00"
# SeaBIOS and the kernel clear the "screen" on the serial console; those escapes are noise in a log.
TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-9;?]*[A-Za-z]|.)")


class HarnessError(RuntimeError):
    """The guest could not be prepared or booted (as opposed to the command inside failing)."""


@dataclass(frozen=True)
class GuestKernel:
    """A Debian kernel flavour: the meta-package that names its current version."""

    name: str
    meta_package: str
    version_prefix: str


KERNELS = {
    k.name: k
    for k in (
        GuestKernel("debian-6.1", "linux-image-amd64", "6.1.0-"),
        GuestKernel("debian-6.12", "linux-image-6.12-amd64", "6.12."),
    )
}


@dataclass(frozen=True)
class PreparedKernel:
    """What a boot needs, all under one cache directory."""

    version: str
    kernel_image: Path  # ELF vmlinux (PVH) or the bzImage
    initramfs: Path


def missing_host_tools() -> str | None:
    """Why guests cannot boot on this host, or None (the tests skip with this reason)."""
    if os.geteuid() != 0:
        return "booting kernel guests needs root (9p export of / and the kernel cache)"
    for tool, package in ((QEMU, "qemu-system-x86"), ("apt-get", "apt"), ("depmod", "kmod"), ("modprobe", "kmod")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: apt-get install -y {package}"
    if not BUSYBOX.exists():
        return f"{BUSYBOX} is missing: apt-get install -y busybox-static"
    return None


# ---------------------------------------------------------------- kernels: fetch and cache


def prepare(kernel: GuestKernel, log: Callable[[str], None] = print) -> PreparedKernel:
    """The cached boot files of ``kernel``, fetched from Debian on first use (~70-110 MB download)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    # Several test runs may share the cache (CI, developers): one fetches, the others wait and reuse.
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = sorted(
            (d for d in CACHE.glob(f"{kernel.version_prefix}*") if (d / "complete").exists()),
            key=lambda d: d.stat().st_mtime,
        )
        target = cached[-1] if cached else _fetch(kernel, log)
    version = target.name
    image = target / "vmlinux" if (target / "vmlinux").exists() else target / "vmlinuz"
    return PreparedKernel(version, image, target / "initramfs.cpio")


def _resolve_package(kernel: GuestKernel) -> str:
    """``linux-image-<version>`` that the meta-package depends on today."""
    out = _run(["apt-cache", "depends", kernel.meta_package]).stdout
    for line in out.splitlines():
        dep = line.strip().removeprefix("Depends:").strip()
        if line.strip().startswith("Depends:") and dep.startswith(f"linux-image-{kernel.version_prefix}"):
            return dep
    # linux-image-6.12-amd64 comes from bookworm-security: package lists older than that lack it.
    raise HarnessError(
        f"apt-cache depends {kernel.meta_package} names no linux-image-{kernel.version_prefix}* package:"
        " run apt-get update"
    )


def _fetch(kernel: GuestKernel, log: Callable[[str], None]) -> Path:
    package = _resolve_package(kernel)
    version = package.removeprefix("linux-image-")
    target = CACHE / version
    log(f"harness: fetching {package} into {target}")
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="fetch-") as tmp:
        work = Path(tmp)
        _run(["apt-get", "download", package], cwd=work)
        (deb,) = work.glob("*.deb")
        tree = work / "tree"
        _run(["dpkg-deb", "-x", str(deb), str(tree)])
        # The package ships no modules.dep (its postinst would run depmod): make one to resolve dependencies.
        _run(["depmod", "-b", str(tree), version])
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        vmlinuz = tree / "boot" / f"vmlinuz-{version}"
        shutil.copy2(vmlinuz, target / "vmlinuz")
        shutil.copy2(tree / "boot" / f"config-{version}", target / "config")
        elf = extract_vmlinux(vmlinuz.read_bytes())
        if elf is not None:
            (target / "vmlinux").write_bytes(elf)
        (target / "initramfs.cpio").write_bytes(build_initramfs(tree, version))
    (target / "complete").write_text(package + "\n")
    return target


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF vmlinux inside an xz-compressed bzImage (scripts/extract-vmlinux), None for other payloads."""
    start = bzimage.find(XZ_MAGIC)
    while start >= 0:
        try:
            data = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[start:])
        except lzma.LZMAError:
            data = b""
        if data.startswith(b"\x7fELF"):
            return data
        start = bzimage.find(XZ_MAGIC, start + 1)
    return None


# ---------------------------------------------------------------- initramfs


def _module_files(tree: Path, version: str) -> list[Path]:
    """The modules to insmod, dependencies first, each once (modprobe --show-depends order)."""
    out = _run(["modprobe", "-d", str(tree), "-S", version, "-a", "--show-depends", *GUEST_MODULES]).stdout
    files: list[Path] = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "insmod" and Path(parts[1]) not in files:
            files.append(Path(parts[1]))
    return files


def _module_bytes(path: Path) -> bytes:
    # busybox insmod loads plain .ko only; Debian's 6.12 modules are .ko.xz.
    data = path.read_bytes()
    return lzma.decompress(data) if path.name.endswith(".xz") else data


INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.order); do insmod /modules/$m || echo "init: insmod $m failed"; done
mkdir -p /newroot
opts=trans=virtio,version=9p2000.L,msize=262144
# The host root is read-only here, so caching it is safe and speeds up Python imports; the project is not.
mount -t 9p -o ro,cache=loose,$opts hostroot /newroot || { echo "init: cannot mount the host root"; reboot -f; }
. /command.env
# tmpfs first: a project under /tmp (a CI clone) is mounted on top of it, not hidden by it.
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p "/newroot$PROJECT"
mount -t 9p -o $opts project "/newroot$PROJECT"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mount -t tracefs tracefs /newroot/sys/kernel/tracing
mount -t debugfs debugfs /newroot/sys/kernel/debug
hostname guest
echo "init: $(uname -r) up after $(cut -d' ' -f1 /proc/uptime) s"
chroot /newroot /bin/sh -c 'cd "$PROJECT" && exec "$@"' guest "$@" </dev/console >/dev/console 2>&1
status=$?
echo "%(marker)s $status"
sync
reboot -f
"""


def _cpio(entries: list[tuple[str, int, bytes, int]]) -> bytes:
    """A newc cpio archive: (name, mode, data, rdev) entries, as the kernel unpacks an initramfs."""
    out = bytearray()
    for ino, (name, mode, data, rdev) in enumerate([*entries, ("TRAILER!!!", 0, b"", 0)], start=1):
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF, len(name) + 1, 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def build_initramfs(tree: Path, version: str) -> bytes:
    """busybox and the 9p/virtio modules, cached per kernel; /init and the command come per boot (``_boot_cpio``)."""
    modules = _module_files(tree, version)
    entries: list[tuple[str, int, bytes, int]] = [
        (d, 0o040755, b"", 0) for d in ("bin", "dev", "proc", "sys", "modules")
    ]
    entries.append(("dev/console", 0o020600, b"", (5 << 8) | 1))
    entries.append(("bin/busybox", 0o100755, BUSYBOX.read_bytes(), 0))
    names = [m.name.removesuffix(".xz") for m in modules]
    entries += [(f"modules/{n}", 0o100644, _module_bytes(m), 0) for n, m in zip(names, modules)]
    entries.append(("modules.order", 0o100644, "\n".join(names).encode() + b"\n", 0))
    return _cpio(entries)


def _boot_cpio(argv: list[str], env: dict[str, str]) -> bytes:
    """/init (never stale in the cache) and /command.env: the environment and the argv, shell-quoted."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    lines.append(f"set -- {shlex.join(argv)}")
    return _cpio([
        ("init", 0o100755, (INIT % {"marker": EXIT_MARKER}).encode(), 0),
        ("command.env", 0o100644, ("\n".join(lines) + "\n").encode(), 0),
    ])


# ---------------------------------------------------------------- boot and run


def guest_python() -> str:
    """The host interpreter by its real path (a pyenv shim costs seconds in the guest)."""
    return str(Path(sys.executable).resolve())


def guest_env() -> dict[str, str]:
    """Environment inside the guest: the project and this interpreter's site-packages importable.

    The real interpreter path leaves a venv's own site-packages out of sys.path, so they are put back
    through PYTHONPATH (with the project first, standing in for an editable install).
    """
    paths = [str(PROJECT)] + [p for p in sys.path if p.endswith("site-packages")]
    return {
        "PROJECT": str(PROJECT),
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "PYTHONUNBUFFERED": "1",
        IN_GUEST_ENV: "1",
    }


def boot(
    kernel: GuestKernel,
    argv: list[str],
    out: TextIO = sys.stdout,
    timeout: float = DEFAULT_TIMEOUT,
) -> int:
    """Run ``argv`` in the project dir inside a guest running ``kernel``; stream the console to ``out``.

    Returns the command's exit status. Raises HarnessError when the guest never reported one
    (boot failure, panic, timeout: QEMU is killed).
    """
    prepared = prepare(kernel, log=lambda line: print(line, file=out, flush=True))
    # Byte-compile on the host (a second) rather than in the guest, where Python runs 15-25x slower.
    compileall.compile_dir(PROJECT / "kprobe_tui", quiet=1)
    compileall.compile_dir(PROJECT / "tests", quiet=1)
    with tempfile.TemporaryDirectory(prefix="kptui-guest-") as tmp:
        initrd = Path(tmp) / "initrd.cpio"
        # The kernel unpacks concatenated cpio archives in turn: cached base, then this boot's init and command.
        initrd.write_bytes(prepared.initramfs.read_bytes() + _boot_cpio(argv, guest_env()))
        cmd = [
            QEMU,
            "-machine", "q35",
            # One host thread runs both vCPUs. With a thread per vCPU, a vCPU could still run a stale
            # translation of kernel text the other had just patched (ftrace/kprobe arming replaces an
            # int3 with a nop): the guest died with "Oops: int3" at that nop, once in a few CI runs.
            "-accel", "tcg,thread=single",
            "-cpu", "max",
            "-m", "2G",
            "-smp", "2",
            "-nographic",
            "-no-reboot",  # the guest's reboot -f and panic=-1 end QEMU
            "-kernel", str(prepared.kernel_image),
            "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 quiet loglevel=3 nokaslr mitigations=off",
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
            "-virtfs", f"local,path={PROJECT},mount_tag=project,security_model=none,multidevs=remap",
            "-device", "virtio-rng-pci",
            "-nic", "none",
        ]  # fmt: skip
        started = time.monotonic()
        print(f"harness: booting {kernel.name} ({prepared.version}): {shlex.join(argv)}", file=out, flush=True)
        status = _stream(cmd, out, timeout)
        print(f"harness: {kernel.name} exited {status} after {time.monotonic() - started:.1f} s", file=out, flush=True)
        return status


def _stream(cmd: list[str], out: TextIO, timeout: float) -> int:
    """Copy QEMU's console to ``out`` until it exits; the guest command's status from the marker line."""
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    timer = _Deadline(proc, timeout)
    status: int | None = None
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = TERMINAL_ESCAPE.sub("", raw.decode(errors="replace").replace("\r", ""))
            out.write(line)
            out.flush()
            marker = EXIT_STATUS.search(line)
            if marker:
                status = int(marker[1])
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if status is None:
        reason = "timed out and was killed" if timer.fired else f"ended (QEMU status {proc.returncode})"
        raise HarnessError(f"the guest {reason} before the command reported its exit status")
    return status


class _Deadline:
    """Kill QEMU's process group after ``timeout`` seconds (a hung guest must not hang CI)."""

    def __init__(self, proc: subprocess.Popen, timeout: float) -> None:
        self.fired = False
        self._timer = threading.Timer(timeout, self._kill, args=(proc,))
        self._timer.daemon = True
        self._timer.start()

    def _kill(self, proc: subprocess.Popen) -> None:
        self.fired = True
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()


def pytest_argv(selection: list[str]) -> list[str]:
    """pytest in the guest: no cache writes into the shared project dir; skip and xfail reasons in the summary."""
    return [guest_python(), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rsxX", *selection]


def capture_snapshots(out: TextIO = sys.stdout) -> list[Path]:
    """(Re)capture tests/fixtures/snapshots/<kernel>.tar.gz with ``kprobe-tui snapshot`` in each guest."""
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    written = []
    for kernel in KERNELS.values():
        target = SNAPSHOTS / f"{kernel.name}.tar.gz"
        status = boot(kernel, [guest_python(), "-m", "kprobe_tui", "snapshot", str(target)], out)
        if status != 0:
            raise HarnessError(f"kprobe-tui snapshot failed in {kernel.name} (exit {status})")
        written.append(target)
    return written


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True)
    except FileNotFoundError as exc:
        raise HarnessError(f"{cmd[0]} is not installed") from exc
    except subprocess.CalledProcessError as exc:
        raise HarnessError(f"{shlex.join(cmd)} failed: {exc.stderr.strip()}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="run pytest inside a guest (default selection: -m kernel tests/kernel)")
    shell = sub.add_parser("shell", help="run any command inside a guest, in the project dir")
    for p in (run, shell):
        p.add_argument("kernel", choices=sorted(KERNELS))
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    sub.add_parser("snapshots", help="recapture tests/fixtures/snapshots/ from both guests")
    args = parser.parse_args(argv)
    reason = missing_host_tools()
    if reason:
        print(f"harness: {reason}", file=sys.stderr)
        return 2
    try:
        if args.mode == "snapshots":
            for path in capture_snapshots():
                print(f"harness: wrote {path} ({path.stat().st_size} bytes)")
            return 0
        extra = args.args[1:] if args.args[:1] == ["--"] else args.args
        if args.mode == "run":
            return boot(KERNELS[args.kernel], pytest_argv(extra or DEFAULT_SELECTION), timeout=args.timeout)
        if not extra:
            parser.error("shell needs a command after --")
        return boot(KERNELS[args.kernel], extra, timeout=args.timeout)
    except HarnessError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
