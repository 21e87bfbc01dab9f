"""File transfers for workspaces that live in a directory on the host (the local backend, unsandboxed runs).

A program may change its workspace while the host reads or writes it (swap a
file for a symlink, a directory for a symlink, a file for a FIFO), so every
operation here resolves its path beneath the workspace root one component at
a time from directory file descriptors, never following a symlink
(`O_NOFOLLOW`), and touches only regular files (opened `O_NONBLOCK`, then
checked with `fstat`): what a program swaps in is refused, never followed.
Reads stop at their size cap. A host folder copied in (a task folder, a project,
an upload) is outside data too and is read the same way (`walk_host_tree`):
from one opened folder, `O_NOFOLLOW` at every level, the top included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from v1.errors import SandboxError

Owner = tuple[int, int] | None
"""(uid, gid) that files the host creates in a workspace get (the sandbox user's), or None to keep ours."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


def relative_parts(path: str) -> list[str]:
    """The components of a workspace-relative path (none: the workspace itself); `SandboxError` for `..` or `/...`."""
    if "\0" in path:
        raise SandboxError(f"{path[:120]!r} holds a NUL byte; no path in a workspace does")
    pure = PurePosixPath(path)
    parts = [part for part in pure.parts if part not in ("", ".")]
    if pure.is_absolute() or ".." in parts:
        raise SandboxError(f"{path!r} is outside the sandbox workspace (a path in it is relative and has no '..')")
    return parts


def _file_parts(path: str) -> tuple[list[str], str]:
    """The parent components and the name of a file path; `SandboxError` for the workspace itself."""
    parts = relative_parts(path)
    if not parts:
        raise SandboxError(f"{path!r} is the workspace itself, not a file in it")
    return parts[:-1], parts[-1]


def _refuse(name: str, why: str) -> SandboxError:
    return SandboxError(f"{name!r} {why}; files in a workspace are read and written only as regular files inside it")


@contextlib.contextmanager
def _open_dir(root: Path, parts: list[str], name: str, create: bool, owner: Owner) -> Iterator[int]:
    """A descriptor of the directory `root/parts...`, walked without following symlinks."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if owner is not None:
                        os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise _refuse(name, "passes through a symlink or a non-directory") from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_file(dir_fd: int, leaf: str, name: str, flags: int, mode: int = 0o644) -> int:
    """A regular file opened beneath `dir_fd`; symlinks, FIFOs, sockets and devices are refused."""
    try:
        fd = os.open(leaf, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, (FileNotFoundError, IsADirectoryError)):
            raise
        raise _refuse(name, f"can't be opened as a regular file ({os.strerror(exc.errno or 0)})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(name)
        raise _refuse(name, "is not a regular file (a FIFO, socket or device)")
    os.set_blocking(fd, True)
    return fd


def write_file_beneath(root: Path, path: str, content: bytes, owner: Owner = None) -> None:
    """Write `content` to `root/path` (parents created), refusing anything but a regular file there."""
    parents, leaf = _file_parts(path)
    with _open_dir(root, parents, path, True, owner) as dir_fd:
        fd = _open_file(dir_fd, leaf, path, os.O_WRONLY | os.O_CREAT)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.ftruncate(fd, 0)
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view[:_CHUNK]) :]
        finally:
            os.close(fd)


def _read_capped(fd: int, name: str, max_bytes: int) -> bytes:
    try:
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, min(_CHUNK, max_bytes + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:
        raise SandboxError(f"{name!r} is larger than its limit of {max_bytes} bytes (raise max_bytes to keep it)")
    return b"".join(chunks)


def read_host_file(path: str, max_bytes: int, beneath: Path | None = None) -> bytes:
    """The bytes of a regular file on the host (an unsandboxed program's artifact): a FIFO or device is refused.

    With `beneath` (a folder of outside data, such as a downloaded task folder), `path` is relative to it
    and read as `read_file_beneath` reads it: no symlink followed at any level, `beneath` itself included.
    """
    if beneath is not None:
        return read_file_beneath(beneath, path, max_bytes)
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _read_capped(_open_file(dir_fd, os.path.basename(path), path, os.O_RDONLY), path, max_bytes)
    finally:
        os.close(dir_fd)


def read_file_beneath(root: Path, path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `root/path`; `SandboxError` past `max_bytes` or for anything else there."""
    parents, leaf = _file_parts(path)
    with _open_dir(root, parents, path, False, None) as dir_fd:
        return _read_capped(_open_file(dir_fd, leaf, path, os.O_RDONLY), path, max_bytes)


@dataclass(frozen=True)
class HostEntry:
    """One thing of a host tree being copied in: a folder, a regular file (its bytes) or a symlink (its target).

    `path` is relative to the tree's top ("" for the top itself).
    """

    path: str
    kind: Literal["dir", "file", "link"]
    content: bytes = b""
    target: str = ""


def _refuse_host(path: str, why: str) -> SandboxError:
    return SandboxError(f"{path!r} {why}; a host folder is copied in beneath its own descriptor, following no symlink")


def _readable_by(info: os.stat_result, reader: Owner) -> bool:
    """Whether the mode bits let `reader` (no supplementary groups) read it (and enter it, for a folder)."""
    if reader is None:
        return True
    need = stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(info.st_mode) else 0)
    if info.st_uid == reader[0]:
        return info.st_mode & need == need
    if info.st_gid == reader[1]:
        return info.st_mode & (need >> 3) == need >> 3
    return info.st_mode & (need >> 6) == need >> 6


def _link_target(dir_fd: int, name: str, relative: str, shown: str) -> str:
    """A symlink's target, when it names a place inside the tree being copied; else refused."""
    target = os.readlink(name, dir_fd=dir_fd)
    landing = posixpath.normpath(posixpath.join(posixpath.dirname(relative), target))
    if target.startswith("/") or landing == ".." or landing.startswith("../"):
        raise _refuse_host(shown, f"is a symlink to {target[:120]!r}, outside the folder being copied")
    return target


def _walk(dir_fd: int, name: str, relative: str, shown: str, reader: Owner, skip: tuple[int, int] | None) -> Iterator[HostEntry]:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        if not relative:
            raise _refuse_host(shown, "is a symlink")
        yield HostEntry(relative, "link", target=_link_target(dir_fd, name, relative, shown))
        return
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return  # a FIFO, socket or device is left out: it holds no file to copy
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags | (os.O_DIRECTORY if stat.S_ISDIR(info.st_mode) else 0), dir_fd=dir_fd)
    except OSError as exc:
        raise _refuse_host(shown, f"changed while it was read, or can't be opened ({os.strerror(exc.errno or 0)})") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise _refuse_host(shown, "changed while it was read")
        if (relative or not stat.S_ISDIR(opened.st_mode)) and not _readable_by(opened, reader):
            raise _refuse_host(
                shown,
                f"is not readable by the sandbox's user (uid {reader[0] if reader else ''}, mode {opened.st_mode & 0o777:o})",
            )
        if stat.S_ISREG(opened.st_mode):
            os.set_blocking(fd, True)
            yield HostEntry(relative, "file", content=_read_all(fd))
            return
        if skip is not None and (opened.st_dev, opened.st_ino) == skip:
            return
        yield HostEntry(relative, "dir")
        for child in sorted(os.listdir(fd)):
            child_relative = f"{relative}/{child}" if relative else child
            yield from _walk(fd, child, child_relative, f"{shown}/{child}", reader, skip)
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, _CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def walk_host_tree(source: Path, reader: Owner = None, skip: Path | None = None) -> Iterator[HostEntry]:
    """What a host file or folder holds, parents first, read beneath descriptors: the way in for every copy-in.

    `source`'s parent is opened as the caller names it; `source` itself and everything below it are
    opened relative to their folder's descriptor with `O_NOFOLLOW` (a symlink at the top is refused; one
    below is kept as a link when its target stays inside the tree, refused otherwise), and what was
    opened is checked with `fstat` to be what was listed. With `reader` (the sandbox's (uid, gid) when
    the host side is root), a file or folder below the top that its mode bits don't let that user read
    is refused: so a hard link can reach no more than the sandbox's user could. FIFOs, sockets and
    devices are left out, and so is a folder that is `skip`.

    Raises:
        SandboxError: a refusal, naming the path and why.
        FileNotFoundError: `source` does not exist.
    """
    top = Path(os.path.abspath(source))
    if not top.name:
        raise _refuse_host(str(source), "is the root folder")
    skipped = None
    if skip is not None:
        with contextlib.suppress(OSError):
            skip_info = os.stat(skip)
            skipped = (skip_info.st_dev, skip_info.st_ino)
    parent = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield from _walk(parent, top.name, "", str(source), reader, skipped)
    finally:
        os.close(parent)


def _copy_tree_in(source: Path, root: Path, path: str, owner: Owner, skip: Path | None = None) -> None:
    for entry in walk_host_tree(source, owner, skip):
        target = f"{path}/{entry.path}" if entry.path else path
        if entry.kind == "dir":
            with _open_dir(root, relative_parts(target), target, True, owner):
                pass
        elif entry.kind == "file":
            write_file_beneath(root, target, entry.content, owner)
        else:
            parents, leaf = _file_parts(target)
            with _open_dir(root, parents, target, True, owner) as dir_fd:
                os.symlink(entry.target, leaf, dir_fd=dir_fd)


def _copy_tree_out(dir_fd: int, entry_name: str, destination: Path, name: str) -> None:
    try:
        fd = _open_file(dir_fd, entry_name, name, os.O_RDONLY)
    except IsADirectoryError:
        child = os.open(entry_name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            destination.mkdir(parents=True, exist_ok=True)
            with os.scandir(child) as entries:
                names = [entry.name for entry in entries]
            for child_name in names:
                with contextlib.suppress(SandboxError):  # a symlink or FIFO inside is left out
                    _copy_tree_out(child, child_name, destination / child_name, f"{name}/{child_name}")
        finally:
            os.close(child)
        return
    try:
        with open(destination, "wb") as out:
            while chunk := os.read(fd, _CHUNK):
                out.write(chunk)
    finally:
        os.close(fd)


async def copy_into(source: Path, root: Path, path: str, owner: Owner = None, skip: Path | None = None) -> None:
    """Copy a host file or directory to `root/path` (beneath `root`, parents created), read as `walk_host_tree` reads it.

    `owner` is also the reader whose mode bits the host files must allow; a folder inside `source` that is
    `skip` is left out with all it holds.
    """
    await asyncio.to_thread(_copy_tree_in, source, root, path, owner, skip)


async def copy_out(root: Path, path: str, destination: Path) -> None:
    """Copy the regular file or directory `root/path` to a host path; symlinks and special files are left out."""
    parts = relative_parts(path)

    def copy() -> None:
        with _open_dir(root, parts[:-1], path, False, None) as dir_fd:
            _copy_tree_out(dir_fd, parts[-1] if parts else ".", destination, path)

    await asyncio.to_thread(copy)


async def write_bytes(root: Path, path: str, content: bytes, owner: Owner = None) -> None:
    """Write `content` to `root/path`, creating its parent folders; see the module docs."""
    await asyncio.to_thread(write_file_beneath, root, path, content, owner)


async def read_bytes(root: Path, path: str, max_bytes: int) -> bytes:
    """The bytes of `root/path`; a `SandboxError` naming `path` when it holds more than `max_bytes`."""
    return await asyncio.to_thread(read_file_beneath, root, path, max_bytes)


__all__ = [
    "HostEntry",
    "Owner",
    "copy_into",
    "copy_out",
    "read_bytes",
    "read_file_beneath",
    "read_host_file",
    "relative_parts",
    "walk_host_tree",
    "write_bytes",
    "write_file_beneath",
]
