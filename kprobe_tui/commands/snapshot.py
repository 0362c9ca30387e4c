"""``kprobe-tui snapshot OUT``: capture this kernel's tracing data for offline use (--snapshot OUT)."""

from __future__ import annotations

import os
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.kernel import snapshot, sources
from kprobe_tui.kernel.capabilities import denied


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "snapshot", help="capture kallsyms, ftrace list, blacklist, BTF into an archive",
        description="Capture what kprobe-tui reads of this kernel into an archive; open it anywhere with "
                    "--snapshot OUT. The archive holds the kernel's real addresses (kallsyms): it is created "
                    "readable by you only (mode 0600); share it only with people you would show them to. "
                    "It is written to a temporary file and renamed into place, so a failure leaves any old OUT intact.",
    )
    parser.add_argument("out", metavar="OUT.tar.gz", help="archive to write (.tar.xz for a smaller one)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists (a symlink is never followed)")
    parser.add_argument("--no-module-btf", action="store_true", help="leave out the per-module BTF files")
    parser.set_defaults(run=run)


def run(args) -> int:
    out = Path(args.out)
    kernel = sources.from_args(args)
    blocked = denied(kernel.tracefs, os.R_OK | os.X_OK) if kernel.tracefs is not None else None
    if blocked:  # a snapshot without tracefs would lack what it is for (the probe files, the README)
        raise UserError(f"cannot capture this kernel's tracing files: {blocked}",
                        "run kprobe-tui snapshot as root, or where an administrator gave you read access to tracefs")
    missing = snapshot.capture(kernel, out, module_btf=not args.no_module_btf, replace=args.force)
    for item in missing:
        print(f"not captured: {item}")
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB, mode 0600: it holds this kernel's addresses)")
    return 0
