"""The files of a run folder, opened as themselves: a symlink (or a FIFO, a device) in a file's place is refused.

A run folder is outside data (`--resume`, `v1 rescore` take folders someone else wrote): a
`results.jsonl`, a `metadata.json` or a leftover `*.tmp` that is a link would make v1 read, append
to or overwrite whatever file it points at, as v1's user. Every file is opened with `O_NOFOLLOW`,
reads and appends only of regular files, and a temporary is created anew (`O_EXCL`) after whatever
stood at its name is removed (the entry itself, never what it points at).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, TextIO

NOT_FOLLOWED = os.O_NOFOLLOW | os.O_CLOEXEC


class NotARegularFileError(OSError):
    """A run folder's file is a symlink, a FIFO, a device or a folder: it is neither read nor written."""


def _refused(path: Path, why: str) -> NotARegularFileError:
    return NotARegularFileError(f"{path}: {why}; a run folder's files must be regular files, not links")


def _checked(path: Path, fd: int) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(path, "not a regular file")
    return fd


def _open(path: Path, flags: int, mode: int = 0o644) -> int:
    try:
        return os.open(path, flags | NOT_FOLLOWED, mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _refused(path, os.strerror(exc.errno or 0)) from None


def read_regular(path: Path) -> BinaryIO:
    """`path` opened for reading. Raises `FileNotFoundError`, or `NotARegularFileError` for anything but a regular file."""
    fd = _checked(path, _open(path, os.O_RDONLY | os.O_NONBLOCK))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular_text(path: Path) -> str:
    """The whole of `path` as UTF-8 text (see `read_regular`)."""
    with read_regular(path) as file:
        return file.read().decode("utf-8")


def append_regular(path: Path) -> TextIO:
    """`path` opened to append text, created if absent (see `read_regular` for what is refused)."""
    fd = _checked(path, _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    return os.fdopen(fd, "a", encoding="utf-8")


def create_new(path: Path) -> TextIO:
    """`path` created empty for writing text, whatever stood there removed first (a link itself, not its target)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise _refused(path, "a folder") from None
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    return os.fdopen(fd, "w", encoding="utf-8")


__all__ = ["NotARegularFileError", "append_regular", "create_new", "read_regular", "read_regular_text"]
