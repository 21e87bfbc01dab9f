"""`v1 sandbox list` and `v1 sandbox reap`: find and delete leftover sandboxes of this machine."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import v1  # v1.sandbox loads when the command runs
from v1.errors import Error


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("sandbox", help="list or reap the sandboxes v1 created on this machine")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="sandboxes in the ledger (and whether their owner process is alive)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    reap = actions.add_parser("reap", help="delete sandboxes whose owner process is gone")
    reap.add_argument("--all", action="store_true", help="also delete sandboxes of live processes")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        records = v1.sandbox.list_sandboxes()
        if args.json:
            for record in records:
                print(json.dumps({**record.__dict__, "labels": list(record.labels)}))
            return 0
        print(f"sandbox root: {v1.sandbox.sandbox_root()}  limits: {v1.sandbox.limits_description()}")
        if not records:
            print("no sandboxes")
        for record in records:
            age = time.time() - record.created
            owner = f"pid {record.owner_pid}" + ("" if record.owner_alive else " (gone)")
            print(f"{record.backend:8} {record.sandbox_id:24} {owner:20} age {age:8.0f}s {' '.join(record.labels)}")
        return 0
    try:
        reaped, failed = asyncio.run(v1.sandbox.reap_sandboxes(include_live=args.all))
    except Error as exc:
        print(f"error: {exc}")
        return 2
    for record in reaped:
        print(f"deleted {record.backend} sandbox {record.sandbox_id}")
    for record, reason in failed:
        print(f"could not delete {record.backend} sandbox {record.sandbox_id}: {reason}")
    print(f"{len(reaped)} deleted, {len(failed)} failed")
    return 1 if failed else 0


__all__ = ["add_parser", "run"]
