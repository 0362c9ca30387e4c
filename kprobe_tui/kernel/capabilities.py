"""What this kernel and this user allow, read from the files present and the tracefs README.

Feature tests go by what the kernel says about itself (files, README lines), never by version
numbers: distributions backport, and configs differ. Each capability carries the sentence a user
needs when it is missing: what it means and what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.files import open_regular
from kprobe_tui.kernel.paths import KernelSources
from kprobe_tui.kernel.permission import denied as denied  # where the commands and access ask it
from kprobe_tui.kernel.permission import may, who

__all__ = ["denied", "detect", "readme_offers", "report"]


@dataclass(frozen=True)
class Capability:
    key: str
    label: str
    present: bool
    detail: str  # when present: what it gives; when missing: what that means and what to do


@dataclass
class Capabilities:
    """Everything ``doctor`` reports, and what the probe builder checks before offering a feature."""

    sources: KernelSources
    items: dict[str, Capability] = field(default_factory=dict)

    def has(self, key: str) -> bool:
        item = self.items.get(key)
        return bool(item and item.present)

    def add(self, key: str, label: str, present: bool, if_present: str, if_missing: str) -> None:
        self.items[key] = Capability(key, label, present, if_present if present else if_missing)

    @property
    def can_probe_kernel(self) -> bool:
        return self.has("kprobe_events") and self.has("write")

    @property
    def can_probe_user(self) -> bool:
        return self.has("uprobe_events") and self.has("write")


# (key, label, README marker, what it gives, what its absence means)
_README_FEATURES = [
    ("fprobe", "fprobe events (f:)", "f[:[<group>/][<event>]]",
     "function-entry/exit probes through ftrace (f:), cheaper than kprobes",
     "no fprobe events (CONFIG_FPROBE_EVENTS): use kprobes (p:/r:) instead"),
    ("btf_args", "BTF argument names", "<argname>",
     "probe arguments by name and ->field, resolved by the kernel from BTF",
     "the kernel cannot resolve argument names (needs >= 6.5 with CONFIG_PROBE_EVENTS_BTF_ARGS): "
     "kprobe-tui compiles names to registers and offsets from BTF itself"),
    ("arg_n", "$arg<N>", "$arg<N>",
     "arguments by position ($arg1...) without knowing the calling convention",
     "no $argN: kprobe-tui compiles arguments to registers (%di, %si, ...)"),
    ("return_args", "arguments on return probes", "return probes support: $retval, $arg",
     "return probes can also read the function's arguments",
     "return probes can read only $retval: capture arguments with a separate entry probe"),
    ("string", "string type", "string",
     "capture C strings (:string)", "no :string type: strings cannot be captured"),
    ("ustring", "ustring type", "ustring",
     "capture strings from user memory in kernel probes (:ustring)",
     "no :ustring: user-space strings from kernel probes read as (fault) or garbage"),
    ("symstr", "symstr type", "symstr",
     "print addresses as symbol+offset strings (:symstr)", "no :symstr: use :symbol or :x64"),
    ("bitfield", "bitfield type", "b<bit-width>@<bit-offset>/<container-size>",
     "capture bitfields exactly (b<width>@<offset>/<size>)",
     "no bitfield type: bitfields are captured as their whole container"),
    ("array", "array type", "<array-size>",
     "capture fixed-size arrays (:u8[16])", "no array type: capture elements one by one"),
]


# Capabilities read from outside tracefs: still known when tracefs is not accessible.
_OUTSIDE_TRACEFS = {"kallsyms", "kallsyms_addresses", "btf", "blacklist", "write"}


README_MARKERS = {key: marker for key, _label, marker, _present, _missing in _README_FEATURES}


def readme_offers(readme: str, key: str) -> bool:
    """Whether a tracefs README advertises a feature (a key of ``README_MARKERS``): the compiler asks this."""
    return README_MARKERS[key] in readme


def _readable(path: Path | None) -> tuple[bool, str]:
    if path is None:
        return False, "its filesystem is not mounted"
    try:
        with open_regular(path, "file") as handle:
            handle.read(1)
        return True, ""
    except UserError as exc:
        return False, exc.message.removeprefix(f"file {path}: ")
    except OSError as exc:
        return False, exc.strerror or str(exc)


def detect(sources: KernelSources) -> Capabilities:
    """Probe the sources once; cheap (a few small reads), safe as any user."""
    caps = Capabilities(sources)
    tracefs = sources.tracefs
    who_am_i = who()
    if tracefs is None:
        missing = "tracefs is not mounted: as root, mount -t tracefs nodev /sys/kernel/tracing"
    else:
        missing = (f"tracefs at {tracefs} is not accessible to this user ({who_am_i}): run as root, or have an admin "
                   "grant a group (mount -o remount,gid=<group> the tracefs)")
    caps.add("tracefs", "tracefs", tracefs is not None and may(tracefs, os.R_OK | os.X_OK),
             f"at {tracefs}" if sources.live else "captured in the snapshot", missing)

    def exists(name: str) -> bool:
        # os.path.exists answers False (not PermissionError) where this user may not look.
        return tracefs is not None and os.path.exists(tracefs / name)

    blind = tracefs is not None and not caps.has("tracefs")

    def add(key: str, label: str, present: bool, if_present: str, if_missing: str) -> None:
        # Without access nothing below tracefs can be seen: say "unknown", not "missing".
        if blind and key not in _OUTSIDE_TRACEFS:
            if_missing = f"unknown: tracefs is not accessible to this user ({who_am_i})"
        caps.add(key, label, present, if_present, if_missing)

    add("kprobe_events", "kernel probes (kprobe_events)", exists("kprobe_events"),
             "kprobes and kretprobes on kernel functions",
             "this kernel was built without CONFIG_KPROBES (or CONFIG_KPROBE_EVENTS): kernel probes are "
             "impossible here" + ("; user-space probes with -x BINARY work" if exists("uprobe_events") else ""))
    add("uprobe_events", "user-space probes (uprobe_events)", exists("uprobe_events"),
             "uprobes and uretprobes on programs and libraries (-x BINARY)",
             "this kernel was built without CONFIG_UPROBE_EVENTS: probes on programs are impossible here")
    add("dynamic_events", "dynamic_events", exists("dynamic_events"),
             "one file lists every probe kind (kprobe, uprobe, fprobe, eprobe)",
             "no dynamic_events file (old kernel): probes are read from kprobe_events and uprobe_events")
    add("error_log", "error_log", exists("error_log"),
             "the kernel explains refused probe definitions, pointing at the bad token",
             "no error_log (kernel < 5.4): a refused probe gives only the errno")
    add("instances", "instances", exists("instances"),
             "a private ring buffer per kprobe-tui, so we never steal trace_pipe from other readers",
             "no tracing instances: events go through the global buffer, shared with other tools")
    readme = ""
    if tracefs is not None and exists("README"):
        try:
            readme = (tracefs / "README").read_text(errors="replace")
        except OSError:
            readme = ""
    for key, label, _marker, if_present, if_missing in _README_FEATURES:
        add(key, label, readme_offers(readme, key), if_present, if_missing)

    ftrace_ok, ftrace_why = _readable(tracefs / "available_filter_functions" if tracefs else None)
    add("ftrace_list", "available_filter_functions", ftrace_ok,
             "which functions ftrace can attach to (cheap probes)",
             f"cannot read available_filter_functions ({ftrace_why}): the function list falls back to "
             "/proc/kallsyms and cannot tell ftrace-able functions from breakpoint-only ones")
    blacklist_ok, blacklist_why = _readable(sources.blacklist)
    add("blacklist", "kprobe blacklist", blacklist_ok,
             f"functions the kernel refuses to probe, from {_shown(sources, sources.blacklist)}",
             "no blacklist: kernels without kprobes have none" if not (exists("kprobe_events") or blind) else
             f"cannot read the kprobe blacklist ({blacklist_why}): blacklisted functions cannot be "
             "flagged in advance; as root, mount debugfs (mount -t debugfs nodev /sys/kernel/debug)")
    kallsyms_ok, kallsyms_why = _readable(sources.kallsyms)
    add("kallsyms", "kallsyms", kallsyms_ok,
             f"every kernel symbol, from {_shown(sources, sources.kallsyms)}",
             f"cannot read {_shown(sources, sources.kallsyms)} ({kallsyms_why}): functions come only from the ftrace list")
    add("kallsyms_addresses", "kernel addresses visible", kallsyms_ok and _addresses_visible(sources.kallsyms),
             "symbol addresses are shown (kptr_restrict allows it for this user)",
             "kallsyms shows zero addresses (kptr_restrict, or not root): sizes, blacklist ranges and "
             "ambiguous-name addresses are unknown; run as root or set kernel.kptr_restrict=0")
    btf_ok, btf_why = _readable(sources.btf_vmlinux)
    add("btf", "kernel BTF", btf_ok,
             f"function prototypes and struct layouts from {_shown(sources, sources.btf_vmlinux)}",
             f"no kernel BTF ({btf_why}): no prototypes; arguments need a vmlinux with debug info "
             "(CONFIG_DEBUG_INFO_BTF gives it)")

    probe_file = next((tracefs / name for name in ("kprobe_events", "uprobe_events") if exists(name)), None) \
        if tracefs is not None else None
    writable = sources.live and probe_file is not None and may(probe_file, os.W_OK)
    add("write", "create probes", writable,
             f"this user ({who_am_i}) can create and remove probes",
             "read-only: " + (
                 "this is a captured snapshot" if not sources.live else
                 f"this user ({who_am_i}) cannot write the probe files; run as root, or have an admin grant a "
                 "group (mount -o remount,gid=<group> the tracefs, or chgrp -R <group> + chmod -R g+rw)"))
    return caps


def _addresses_visible(kallsyms: Path) -> bool:
    try:
        with open_regular(kallsyms, "kallsyms file") as handle:
            for _ in range(50):
                line = handle.readline(4096)  # bytes: a file that is not text is not a reason to fail here
                if not line:
                    break
                if line.split(b" ", 1)[0].strip(b"0"):
                    return True
    except (UserError, OSError):
        pass
    return False


_SECTIONS = [
    ("Tracing", ["tracefs", "instances", "error_log", "write"]),
    ("Probe kinds", ["kprobe_events", "uprobe_events", "dynamic_events", "fprobe"]),
    ("Arguments", ["btf_args", "arg_n", "return_args", "string", "ustring", "symstr", "bitfield", "array"]),
    ("Function data", ["ftrace_list", "kallsyms", "kallsyms_addresses", "blacklist", "btf"]),
]


def _shown(sources: KernelSources, path: Path | None) -> str:
    """A path as the user knows it: a snapshot's file by its place in the snapshot, not by the temporary
    directory it was unpacked in."""
    if sources.live or sources.tracefs is None or path is None:
        return str(path)
    try:
        return f"the snapshot's {path.relative_to(sources.tracefs.parent)}"
    except ValueError:
        return str(path)


def report(caps: Capabilities) -> str:
    """The ``doctor`` report: one line per capability, grouped, with a verdict at the end."""
    lines = []
    origin = "this machine" if caps.sources.live else "a captured snapshot"
    lines.append(f"kprobe-tui doctor: {origin}")
    lines.extend(f"  note: {note}" for note in caps.sources.notes)
    for title, keys in _SECTIONS:
        lines.append("")
        lines.append(title)
        for key in keys:
            item = caps.items[key]
            mark = "ok" if item.present else "--"
            lines.append(f"  [{mark}] {item.label:<36} {item.detail}")
    lines.append("")
    lines.append("Verdict")
    for label, kind_key, possible in (
        ("kernel probes", "kprobe_events", caps.can_probe_kernel),
        ("user-space probes (-x BINARY)", "uprobe_events", caps.can_probe_user),
    ):
        if possible:
            lines.append(f"  {label}: yes")
        elif not caps.has(kind_key):
            lines.append(f"  {label}: no ({caps.items[kind_key].detail})")
        elif not caps.sources.live:
            lines.append(f"  {label}: yes on that kernel (a snapshot can only be explored, not probed)")
        else:
            lines.append(f"  {label}: no ({caps.items['write'].detail})")
    return "\n".join(lines)
