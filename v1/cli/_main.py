"""`v1 COMMAND ...`: the command-line entry point.

Each command is a module of `v1.cli` with ``add_parser(commands)``, which adds its
subparser and sets ``run=FUNCTION`` (``FUNCTION(args) -> int``, the exit status)
with ``parser.set_defaults``; a command that takes free-form extra flags also sets
``accepts_extra_args=True`` (they arrive as ``args.extra``). A new command is one
more entry in `COMMANDS`.
"""

from __future__ import annotations

import argparse
import sys

import v1
from v1.cli import _demo as demo
from v1.cli import _doctor as doctor_command
from v1.cli import _eval as eval_command
from v1.cli import _init as init_command
from v1.cli import _rescore as rescore_command
from v1.cli import _sandbox as sandbox_command
from v1.cli import _serve as serve_command
from v1.cli import _train as train_command
from v1.cli import _validate as validate_command
from v1.cli import _view as view_command
from v1.cli._standalone import OneLineErrorParser

COMMANDS = (
    demo,
    eval_command,
    init_command,
    validate_command,
    rescore_command,
    train_command,
    serve_command,
    sandbox_command,
    view_command,
    doctor_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="v1", description="LLM evaluation and RL environments.")
    parser.add_argument("--version", action="version", version=f"v1 {v1.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return int(args.run(args) or 0)


__all__ = ["COMMANDS", "build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
