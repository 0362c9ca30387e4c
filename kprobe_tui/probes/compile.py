"""From a ProbeSpec to what the kernel takes: the place and the fetch-args, by the best back-end at hand.

Kernel probes and uprobes go through the same code: only the place differs (``func+off`` vs
``/path:0xFILEOFFSET``) and what a fetch-arg may name (uprobes cannot take ``@symbol``, they take
``@+FILEOFFSET``). Registers and the like need no debug info (``rawfetch``); C-level variables are
compiled from DWARF (``dwarffetch``) or, for kernel entry and return probes without debug info, from
BTF (``btffetch``); every back-end names events and fetch-args the same way (``naming``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kprobe_tui.blocking import blocking
from kprobe_tui.errors import UserError
from kprobe_tui.kernel.capabilities import readme_offers
from kprobe_tui.probes.rawfetch import compile_raw, needs_debuginfo
from kprobe_tui.probes.spec import BARE_INT_TYPES, CompiledProbe, ProbeSpec
from kprobe_tui.probes.symbols import elf_symbols


def _has_dwarf(path: str) -> bool:
    """Whether a file carries its own .debug_info (then $retval gets the function's return type)."""
    try:
        return elf_symbols(path).has_debug_info
    except UserError:
        return False


def compile_spec(
    spec: ProbeSpec,
    group: str,
    taken: Iterable[str] = (),
    *,
    readme: str = "",
    vmlinux: str | None = None,
    btf_path: str | Path | None = None,
) -> list[CompiledProbe]:
    """Compile a spec the best way available: raw, from DWARF (-x BIN or -k VMLINUX), or from BTF.

    ``readme`` is tracefs README: it says whether this kernel takes $argN, BTF argument names, and
    arguments on return probes.
    A place can compile to several probes (a line's addresses, inlined copies): as perf makes them, they
    are one event (the kernel appends each to it), shown and counted as the one thing asked for; only
    copies whose fields differ (the kernel refuses those in one event) get names of their own, ``ev_1``...
    Each is checked to be one valid definition line (``CompiledProbe.check``) before it is returned.
    """
    blocking(f"compiling {spec.place_text()}")
    debug_file = spec.binary or vmlinux
    # $retval gets the function's return type (kprobe-tui's dialect), or its width (:x, :u, :s);
    # perf leaves a bare $retval untyped.
    untyped_retval = any(a.kind == "retval" and (a.type in BARE_INT_TYPES or not (a.type or spec.perf_dialect))
                         for a in spec.args)
    typed_retval = untyped_retval and (_has_dwarf(debug_file) if debug_file else _btf_available(btf_path))
    # The DWARF and BTF back-ends are imported when needed: ~25 ms and ~3 ms on top of this module
    # (-X importtime), which a probe on registers, from the command line, never pays.
    if not needs_debuginfo(spec) and not typed_retval:
        probes = [compile_raw(spec, group, taken, arg_n_supported=readme_offers(readme, "arg_n"),
                              return_args=readme_offers(readme, "return_args"))]
    elif spec.is_uprobe or vmlinux or spec.module:
        from kprobe_tui.probes.dwarffetch import compile_dwarf

        probes = compile_dwarf(spec, group, taken, vmlinux=vmlinux, readme=readme)
    else:
        from kprobe_tui.probes.btffetch import compile_btf

        probes = [compile_btf(spec, group, taken, readme=readme, btf_path=btf_path)]
    return [probe.check() for probe in probes]


def running_kernel_vmlinux(spec: ProbeSpec, debuginfod=None) -> str | None:
    """The running kernel's debug vmlinux for a kernel probe that reads C, found where perf finds it, or None.

    perf compiles a kernel probe from DWARF whenever it finds the vmlinux, and so do we (the same fetch-args
    and types as perf's). A line, a local or a source pattern cannot be said without it: it may come from
    debuginfod, and where it is nowhere the locator's error says where it looked and what to install.
    Parameters at entry or exit, which BTF names too, take it from disk only: no 600 MB download for them.
    """
    if spec.is_uprobe or spec.module or not needs_debuginfo(spec):
        return None
    from kprobe_tui.debuginfo.debuginfod import Client  # here: ~4 ms to import (-X importtime); only a kernel probe reading C needs it
    from kprobe_tui.debuginfo.locate import find_vmlinux  # here: ~5 ms to import (-X importtime), as above

    btf_names_it = spec.kind in ("entry", "return", "fprobe") and spec.source is None and \
        not any(arg.kind == "vars" for arg in spec.args)
    try:
        return str(find_vmlinux(debuginfod=Client(offline=True) if btf_names_it else debuginfod).debug_file)
    except UserError:
        if btf_names_it:
            return None
        raise


def _btf_available(btf_path: str | Path | None) -> bool:
    return Path(btf_path or "/sys/kernel/btf/vmlinux").exists()

