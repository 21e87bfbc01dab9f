"""Logging utilities: `setup_logging`, `log_level`, `quiet_verifiers` (the ``VF_LOG_LEVEL`` variable).

Every v1 module logs under the ``v1`` logger; these set its level and its one handler.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

LOGGER_NAME = "v1"
LEVEL_VARIABLE = "VF_LOG_LEVEL"
DEFAULT_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"


class _SetupHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `setup_logging` installs (found again, not doubled, when it is called twice)."""


def resolve_level(level: str | int) -> int:
    """The numeric logging level of `level` ("debug", "INFO", 10, ...).

    Raises:
        ValueError: not a logging level name or a non-negative number.
    """
    if isinstance(level, bool) or not isinstance(level, (str, int)):
        raise ValueError(f"log level must be a level name or number, got {level!r}")
    if isinstance(level, int):
        if level < 0:
            raise ValueError(f"log level must be a level name or a number >= 0, got {level}")
        return level
    number = logging.getLevelName(level.strip().upper())
    if not isinstance(number, int):
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return number


def setup_logging(level: str | int | None = None, log_format: str = DEFAULT_FORMAT) -> logging.Logger:
    """Send v1's log records at `level` and above to stderr; returns the ``v1`` logger.

    Args:
        level: a level name or number; default: the ``VF_LOG_LEVEL`` environment variable, else "INFO".
        log_format: the records' `logging.Formatter` format.

    Raises:
        ValueError: `level` (or ``VF_LOG_LEVEL``) is not a log level.
    """
    if level is None:
        level = os.environ.get(LEVEL_VARIABLE) or "INFO"
    number = resolve_level(level)
    logger = logging.getLogger(LOGGER_NAME)
    for handler in [h for h in logger.handlers if isinstance(h, _SetupHandler)]:
        logger.removeHandler(handler)
    handler = _SetupHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(log_format))
    logger.addHandler(handler)
    logger.setLevel(number)
    return logger


@contextmanager
def log_level(level: str | int) -> Iterator[logging.Logger]:
    """Set the ``v1`` logger's level inside the block; the previous level comes back after it (also on error)."""
    number = resolve_level(level)
    logger = logging.getLogger(LOGGER_NAME)
    previous = logger.level
    logger.setLevel(number)
    try:
        yield logger
    finally:
        logger.setLevel(previous)


def quiet_verifiers() -> AbstractContextManager[logging.Logger]:
    """Only warnings and errors from v1 inside the block: ``log_level("WARNING")``."""
    return log_level("WARNING")


__all__ = ["LEVEL_VARIABLE", "LOGGER_NAME", "log_level", "quiet_verifiers", "resolve_level", "setup_logging"]
