"""`v1 view [DIR ...]`: a local web viewer over eval and training run folders.

Each DIR is a run folder or holds run folders below it (default: `outputs`). Prints the URL,
then serves until Ctrl-C. Binds loopback unless `--host` says otherwise.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import v1  # v1.view (aiohttp) loads when the command runs

DEFAULT_DIR = "outputs"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("view", help="browse eval and training runs in a local web page")
    parser.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help=f"a run folder, or a folder with run folders below it (default {DEFAULT_DIR})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default 0)")
    parser.set_defaults(run=run)


def run(args: Any) -> int:
    dirs = [Path(d) for d in args.dirs] or [Path(DEFAULT_DIR)]
    for folder in dirs:
        if not folder.exists():
            hint = " (no DIR given: pass the folder of a run, or one that holds runs)" if not args.dirs else ""
            print(f"v1 view: error: {folder}: no such folder{hint}", file=sys.stderr)
            return 2
        if not folder.is_dir():
            print(f"v1 view: error: {folder}: not a folder; pass a run folder (the one holding results.jsonl)", file=sys.stderr)
            return 2
    if not 0 <= args.port <= 65535:
        print(f"v1 view: error: --port {args.port}: expected 0 to 65535", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"v1 view: {len(dirs)} folder(s) at {url} (Ctrl-C to stop)", flush=True)
        if args.host not in LOOPBACK:
            print(f"v1 view: note: listening on {args.host}: anyone who can reach it can read these runs", flush=True)

    try:
        asyncio.run(v1.view.serve([d.resolve() for d in dirs], args.host, args.port, ready))
    except OSError as exc:
        print(f"v1 view: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


__all__ = ["DEFAULT_DIR", "LOOPBACK", "add_parser", "run"]
