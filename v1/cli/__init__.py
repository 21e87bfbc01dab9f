"""The `v1` command line: `main` is the console script (``v1 ...``, ``python -m v1.cli ...``)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run one `v1` command line (`argv`, else the process's arguments); the exit status.

    Args:
        argv: the arguments after the program name.
    """
    from v1.cli._main import main as run  # on call, so `python -m v1.cli._eval` runs a module not yet imported

    return run(argv)


__all__ = ["main"]
