"""A root host side gives each local sandbox filesystems of its own, so no host path shows inside.

`/proc/self/mountinfo` names, for every mount, the path of its root within its
filesystem: a bind of a host directory shows where that directory lies on the
host (`/tmp/v1-sandboxes/local/<id>/workspace`). A workspace that is the root of
its own filesystem shows `/`. So, where the host side is root, a sandbox's
workspace is an ext4 image of `disk_size_gb` (sparse, no journal; creating and
mounting it takes about 40 ms, once per sandbox) loop-mounted at the workspace
path, which also caps the disk use in the kernel; and its run directory
(sockets) is a small tmpfs. Elsewhere (not root, or no loop devices, as in a
default Docker container) the directories stay plain and their host paths
show; docs/sandbox.md says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)
_warned: set[str] = set()

IMAGE_NAME = "workspace.img"
HEADROOM_BYTES = 32 * 1024**2
"""Room over the disk limit in the image: the disk watch reports the limit first; the full image is the hard stop."""
RUN_DIR_BYTES = 1024**2
COMMAND_TIMEOUT_S = 30


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
    if shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        _warn_once("v1 sandbox: no mkfs.ext4 or mount here: a workspace's host path shows in its sandbox's mountinfo")
        return False
    try:
        with open(image, "wb") as file:
            file.truncate(image_bytes(limit_bytes, image.parent))
        options = f"lazy_itable_init=1,nodiscard,root_owner={owner[0]}:{owner[1]}"
        _run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", "-E", options, str(image)])
        _run(["mount", "-o", "loop,nosuid,nodev,noinit_itable", str(image), str(workspace)])
    except (OSError, subprocess.SubprocessError) as exc:
        _warn_once(f"v1 sandbox: workspaces stay host directories (their paths show in mountinfo): {exc}")
        with contextlib.suppress(OSError):
            image.unlink()
        return False
    with contextlib.suppress(OSError):
        (workspace / "lost+found").rmdir()
    return True


def mount_run_dir(run_dir: Path, owner: tuple[int, int]) -> bool:
    """Make `run_dir` a small tmpfs of its own owned by `owner`; False where it can't be."""
    options = f"size={RUN_DIR_BYTES},mode=0700,uid={owner[0]},gid={owner[1]},nosuid,nodev,noexec"
    try:
        _run(["mount", "-t", "tmpfs", "-o", options, "v1-run", str(run_dir)])
    except (OSError, subprocess.SubprocessError) as exc:
        _warn_once(f"v1 sandbox: run directories stay host directories (their paths show in mountinfo): {exc}")
        return False
    return True


def unmount(path: Path) -> None:
    """Detach a mount made here (lazily: a process still inside keeps it until it exits); nothing if none."""
    if os.path.ismount(path):
        _run(["umount", "--lazy", str(path)])


__all__ = ["IMAGE_NAME", "image_bytes", "mount_run_dir", "mount_workspace", "unmount"]
