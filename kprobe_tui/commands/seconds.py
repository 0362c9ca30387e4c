"""Options counted in seconds (--duration, --interval): a finite positive number, or a usage error.

argparse's ``float`` takes "nan", "inf" and "1e309" (inf): a deadline of now + nan is never reached
and never passed, so ``count -d nan`` ran until killed.
"""

from __future__ import annotations

import math

from kprobe_tui.errors import UserError


def check_seconds(args, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"--{name} {value}: must be a positive number of seconds", f"e.g. --{name} 10")
