"""The administrator's file of per-student tokens: who may log in to ``kprobe-tui serve``, and as whom.

One line a user, ``USER ROLE SHA256``: ROLE is ``student`` or ``teacher`` (who may also see the teacher's
view). Only the token's SHA-256 is stored: a token is 256 random bits, so a slow password hash would add
nothing against guessing it, and the file leaks no way in. The file holds the keys to sessions run as
each student, so it must be root's (or the server's user's) and 0600: any other is refused, not read.
With ``serve --pam`` a student may instead give their Unix password, checked by PAM (``check_password``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pwd
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from kprobe_tui.errors import UserError
from kprobe_tui.files import NoSuchFile, open_regular, write_atomic

DEFAULT_PATH = Path("/etc/kprobe-tui/serve-tokens")
ROLES = ("student", "teacher")
# A class of a few hundred students is a few tens of KiB; more is not a token file.
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Login:
    """Who a token belongs to."""

    user: str
    uid: int
    gid: int
    home: str
    teacher: bool


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def read_entries(path: Path) -> dict[str, tuple[str, str]]:
    """user -> (role, digest), from a file only the server's user can read and write."""
    with open_regular(path, "token file") as stream:
        info = os.fstat(stream.fileno())
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise UserError(f"token file {path}: owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o}: "
                            f"others could read or change who logs in",
                            f"chown {os.geteuid()} {path} && chmod 600 {path}")
        data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UserError(f"token file {path}: larger than {MAX_BYTES >> 20} MiB", "check that it is the token file you meant")
    entries = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 3 or words[1] not in ROLES or len(words[2]) != 64:
            raise UserError(f"token file {path}, line {number}: not USER ROLE SHA256 (ROLE student or teacher)",
                            "fix or remove the line, or add the user again with kprobe-tui serve --add-token USER")
        entries[words[0]] = (words[1], words[2])
    return entries


def check(path: Path, user: str, token: str) -> Login | None:
    """The login ``user`` and ``token`` prove, or None. Compared in constant time, and refused for a
    user who has left the machine since the token was made."""
    role, digest = read_entries(path).get(user, ("", "0" * 64))
    if not hmac.compare_digest(digest, _digest(token)) or not role:
        return None
    return _login(user, teacher=role == "teacher")


def check_password(user: str, password: str) -> Login | None:
    """The student ``user`` proves with their Unix password, through PAM's ``login`` service (its
    pam_faildelay makes each wrong guess cost 3 s on Debian); never root, never a teacher."""
    # here: pamela is optional (the pam extra); serve --pam checks it is installed
    import pamela  # type: ignore[import-untyped]

    try:
        pamela.authenticate(user, password, service="login", resetcred=0)  # no credentials set in the server
    except pamela.PAMError:
        return None
    return _login(user, teacher=False)


def _login(user: str, *, teacher: bool) -> Login | None:
    """``user``'s Login, or None for a user who has left the machine, and for root (a session as root is
    what serve exists to avoid: add() refuses it, a line edited in by hand or PAM must too)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    if entry.pw_uid == 0:
        return None
    return Login(user, entry.pw_uid, entry.pw_gid, entry.pw_dir, teacher)


def add(path: Path, user: str, *, teacher: bool) -> str:
    """A new token for ``user`` (replacing theirs), written to the file; returned to show once."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise UserError(f"no user {user!r} on this machine", "give the Unix user the student logs in as") from None
    if entry.pw_uid == 0:
        raise UserError("a browser session as root is what kprobe-tui serve exists to avoid",
                        "give each student (and teacher) their own Unix user")
    try:
        entries = read_entries(path)
    except NoSuchFile:
        entries = {}
    token = secrets.token_urlsafe(32)
    entries[user] = ("teacher" if teacher else "student", _digest(token))
    text = "".join(f"{name} {role} {digest}\n" for name, (role, digest) in sorted(entries.items()))
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    write_atomic(path, lambda stream: stream.write(text.encode()), replace=True, what="token file")  # 0600
    return token
