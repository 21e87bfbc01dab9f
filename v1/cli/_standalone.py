"""One `v1` command run on its own: ``python -m v1.cli._eval ...`` and the ``vf-eval`` script.

`v1.cli` runs every command under one parser; `run_command` builds the parser
of a single command module (its ``add_parser``) and runs it the same way.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import NoReturn


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line (``v1 eval: error: ...``) and exit status 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_command(module: ModuleType, argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse `argv` with the one command `module` adds and run it; its exit status.

    Args:
        module: a command module of `v1.cli` (with ``add_parser(commands)``).
        argv: the arguments (default: ``sys.argv[1:]``).
        prog: the name usage and errors show (default: ``v1 COMMAND``).
    """
    holder = OneLineErrorParser(prog="v1")
    commands = holder.add_subparsers(dest="command", required=True)
    module.add_parser(commands)
    ((name, parser),) = commands.choices.items()
    if prog is not None:
        parser.prog = prog
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_extra_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.command, args.extra = name, extra
    return int(args.run(args) or 0)


__all__ = ["OneLineErrorParser", "run_command"]
