"""File transfers for workspaces that live in a directory on the host (the local backend, unsandboxed runs).

A program may change its workspace while the host reads or writes it (swap a
file for a symlink, a directory for a symlink, a file for a FIFO), so every
operation here resolves its path beneath the workspace root one component at
a time from directory file descriptors, never following a symlink
(`O_NOFOLLOW`), and touches only regular files (opened `O_NONBLOCK`, then
checked with `fstat`): what a program swaps in is refused, never followed.
Reads stop at their size cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

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


def read_host_file(path: str, max_bytes: int) -> bytes:
    """The bytes of a regular file on the host (an unsandboxed program's artifact): a FIFO or device is refused."""
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


def _copy_tree_in(source: Path, root: Path, path: str, owner: Owner, skip: Path | None = None) -> None:
    if source.is_symlink():
        parents, leaf = _file_parts(path)
        with _open_dir(root, parents, path, True, owner) as dir_fd:
            os.symlink(os.readlink(source), leaf, dir_fd=dir_fd)
    elif source.is_dir():
        with _open_dir(root, relative_parts(path), path, True, owner):
            pass
        for child in sorted(source.iterdir()):
            if child != skip:
                _copy_tree_in(child, root, f"{path}/{child.name}", owner, skip)
    elif source.is_file():
        write_file_beneath(root, path, source.read_bytes(), owner)


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
    """Copy a host file or directory to `root/path` (beneath `root`, parents created, symlinks kept as links).

    A folder inside `source` that resolves to `skip` is left out with all it holds. Both are resolved once:
    the walk follows no symlink, so every folder it reaches is its resolved path.
    """

    def copy() -> None:
        _copy_tree_in(source.resolve(), root, path, owner, skip.resolve() if skip is not None else None)

    await asyncio.to_thread(copy)


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
    "Owner",
    "copy_into",
    "copy_out",
    "read_bytes",
    "read_file_beneath",
    "read_host_file",
    "relative_parts",
    "write_bytes",
    "write_file_beneath",
]
