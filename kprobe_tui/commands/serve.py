"""``kprobe-tui serve``: the TUI in a browser for a class, each student's session as their own Unix user."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

from kprobe_tui.errors import UserError


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("serve", help="serve the TUI to browsers: one session per student, as their own user")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (beyond loopback only with TLS)")
    parser.add_argument("--port", type=int, default=8022, help="port to listen on (0: any free port; default 8022)")
    parser.add_argument("--tokens", metavar="FILE", type=Path, default=None,
                        help="the per-student token file (default /etc/kprobe-tui/serve-tokens)")
    parser.add_argument("--certfile", metavar="FILE", help="TLS certificate (PEM)")
    parser.add_argument("--keyfile", metavar="FILE", help="its private key (PEM)")
    parser.add_argument("--public-url", metavar="URL",
                        help="the URL browsers use, behind a reverse proxy (its origin is the only one accepted)")
    parser.add_argument("--pam", action="store_true",
                        help="students may also log in with their Unix password (PAM service login; needs pamela)")
    parser.add_argument("--add-token", metavar="USER", help="make a token for USER (replacing theirs), print it and exit")
    parser.add_argument("--teacher", action="store_true", help="with --add-token: the user may also see the teacher's view")
    parser.set_defaults(run=run)


def run(args) -> int:
    from kprobe_tui.serve import server, tokens  # here: ~32 ms to import (-X importtime), more than --help should pay

    token_file = args.tokens or tokens.DEFAULT_PATH
    if args.add_token:
        token = tokens.add(token_file, args.add_token, teacher=args.teacher)
        print(f"token for {args.add_token} (shown once; give it to them privately): {token}")
        return 0
    if args.teacher:
        raise UserError("--teacher goes with --add-token USER", "kprobe-tui serve --add-token USER --teacher")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port", "give a number from 1 to 65535 (0: any free port)")
    if args.public_url and not args.public_url.startswith(("http://", "https://")):
        raise UserError(f"--public-url {args.public_url} is not an http:// or https:// URL", "give the URL browsers open")
    tls = server.check_listening(args.host, args.certfile, args.keyfile)
    if args.pam:
        if importlib.util.find_spec("pamela") is None:
            raise UserError("--pam needs the pamela library, which is not installed", "pip install pamela")
    else:  # a missing or unsafe token file said at start, not at the first login
        tokens.read_entries(token_file)
    asyncio.run(server.serve(args.host, args.port, token_file, tls, args.public_url, args.pam))
    return 0
