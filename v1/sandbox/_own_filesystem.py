"""A root host side gives each local sandbox filesystems of its own, so no host path shows inside.

`/proc/self/mountinfo` names, for every mount, the path of its root within its
filesystem: a bind of a host directory shows where that directory lies on the
host (`/tmp/v1-sandboxes/local/<id>/workspace`). A workspace that is the root of
its own filesystem shows `/`. So, where the host side is root, a sandbox's
workspace is an ext4 image of `disk_size_gb` (sparse, no journal; made and
mounted once per sandbox, unmounted at its deletion) loop-mounted at the workspace
path, which also caps the disk use in the kernel; and its run directory
(sockets) is a small tmpfs. Elsewhere (not root, or no loop devices, as in a
default Docker container) the directories stay plain and their host paths
show; docs/sandbox.md says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import shutil
import struct
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)
_warned: set[str] = set()

IMAGE_NAME = "workspace.img"
HEADROOM_BYTES = 32 * 1024**2
"""Room over the disk limit in the image: the disk watch reports the limit first; the full image is the hard stop."""
RUN_DIR_BYTES = 1024**2
COMMAND_TIMEOUT_S = 30
LOOP_ATTEMPTS = 20
LOOP_CTL_GET_FREE, LOOP_SET_FD, LOOP_CLR_FD, LOOP_SET_STATUS64 = 0x4C82, 0x4C00, 0x4C01, 0x4C04
LOOP_INFO64_BYTES, LO_FLAGS_OFFSET, LO_FLAGS_AUTOCLEAR = 232, 52, 4
"""`struct loop_info64` (linux/loop.h): 232 bytes, `lo_flags` after five u64 and three u32 fields."""
MS_NOSUID, MS_NODEV, MS_NOEXEC, MNT_DETACH = 0x2, 0x4, 0x8, 0x2


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv[:2])} failed: {(done.stderr or done.stdout).strip()[:300]}")


def image_bytes(limit_bytes: int, host_dir: Path) -> int:
    """The image's size: the disk limit and some headroom, never more than the host filesystem holds."""
    stats = os.statvfs(host_dir)
    return min(limit_bytes + limit_bytes // 16 + HEADROOM_BYTES, stats.f_blocks * stats.f_frsize)


def mount_workspace(workspace: Path, image: Path, limit_bytes: int, owner: tuple[int, int]) -> bool:
    """Make `workspace` the root of a fresh ext4 image owned by `owner`; False (and nothing left) where it can't be."""
    if shutil.which("mkfs.ext4") is None:
        _warn_once("v1 sandbox: no mkfs.ext4 here: a workspace's host path shows in its sandbox's mountinfo")
        return False
    try:
        with open(image, "wb") as file:
            file.truncate(image_bytes(limit_bytes, image.parent))
        options = f"lazy_itable_init=1,nodiscard,root_owner={owner[0]}:{owner[1]}"
        _run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-E", options, str(image)])
        _mount_image(image, workspace)
    except (OSError, subprocess.SubprocessError) as exc:
        _warn_once(f"v1 sandbox: workspaces stay host directories (their paths show in mountinfo): {exc}")
        with contextlib.suppress(OSError):
            image.unlink()
        return False
    with contextlib.suppress(OSError):
        (workspace / "lost+found").rmdir()
    return True


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _mount(source: str, target: Path, fstype: str, flags: int, data: str) -> None:
    if _libc().mount(source.encode(), str(target).encode(), fstype.encode(), flags, data.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {fstype} on {target}: {os.strerror(code)}")


def _mount_image(image: Path, target: Path) -> None:
    """Attach `image` to a free loop device (detached again when unmounted) and mount it at `target`."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(LOOP_ATTEMPTS):  # another process may take the free device first
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(device, LOOP_SET_FD, backing)
            except OSError as exc:
                os.close(device)
                if exc.errno == errno.EBUSY:
                    continue
                raise
            try:
                status = bytearray(LOOP_INFO64_BYTES)
                struct.pack_into("I", status, LO_FLAGS_OFFSET, LO_FLAGS_AUTOCLEAR)
                fcntl.ioctl(device, LOOP_SET_STATUS64, bytes(status))
                _mount(f"/dev/loop{number}", target, "ext4", MS_NOSUID | MS_NODEV, "noinit_itable")
            except OSError:
                with contextlib.suppress(OSError):
                    fcntl.ioctl(device, LOOP_CLR_FD)
                raise
            finally:
                os.close(device)
            return
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(backing)
        os.close(control)


def mount_run_dir(run_dir: Path, owner: tuple[int, int]) -> bool:
    """Make `run_dir` a small tmpfs of its own owned by `owner`; False where it can't be."""
    try:
        _mount(
            "v1-run",
            run_dir,
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            f"size={RUN_DIR_BYTES},mode=0700,uid={owner[0]},gid={owner[1]}",
        )
    except OSError as exc:
        _warn_once(f"v1 sandbox: run directories stay host directories (their paths show in mountinfo): {exc}")
        return False
    return True


def unmount(path: Path) -> None:
    """Detach a mount made here (lazily: a process still inside keeps it until it exits); nothing if none."""
    if os.path.ismount(path) and _libc().umount2(str(path).encode(), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"umount {path}: {os.strerror(code)}")


__all__ = ["IMAGE_NAME", "image_bytes", "mount_run_dir", "mount_workspace", "unmount"]
