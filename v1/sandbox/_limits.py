"""Resource limits of local sandboxes: cgroups where this machine lets us write them, else rlimits.

`cgroup_support()` probes once: a cgroup v2 subtree with the memory and pids
controllers delegated to us, or writable cgroup v1 `memory` and `pids`
hierarchies. With cgroups a sandbox gets one cgroup per controller: memory
(the OOM killer ends the sandbox's processes at the limit) and process count
(`pids.max`: fork fails beyond it). Without them the launcher watches the
sandbox's PID namespace every 50 ms (resident memory, process count) and kills
it over a limit, with `RLIMIT_NPROC` as a backstop for fast fork bombs.
`RLIMIT_FSIZE` (largest file = the disk size) is always set. CPU is not capped:
a CFS quota per sandbox cut command throughput about 4x on a loaded 2-core
machine (benchmarks/sandbox.py), so `cpu_cores` is a request the local
backend does not enforce.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP_DIR = "v1-sandboxes"


@dataclass(frozen=True)
class CgroupSupport:
    """Where sandbox cgroups are created: controller name -> parent directory."""

    version: int
    parents: dict[str, Path]

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(sorted(self.parents))})"


def _own_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _writable_parent(base: Path) -> Path | None:
    parent = base / GROUP_DIR
    probe = parent / f"probe-{os.getpid()}"
    try:
        parent.mkdir(exist_ok=True)
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return None
    return parent


@functools.cache
def cgroup_support() -> CgroupSupport | None:
    """The cgroups this process can create sandbox cgroups in, or None (rlimits then)."""
    if os.environ.get("V1_SANDBOX_LIMITS") == "rlimit":
        return None
    own = _own_paths()
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists():
        base = CGROUP_ROOT / own.get("", "/").lstrip("/")
        with contextlib.suppress(OSError):
            enabled = set((base / "cgroup.subtree_control").read_text().split())
            if {"memory", "pids"} <= enabled:
                parent = _writable_parent(base)
                if parent is not None:
                    with contextlib.suppress(OSError):
                        (parent / "cgroup.subtree_control").write_text("+memory +pids")
                    return CgroupSupport(2, {"unified": parent})
        return None
    parents: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        hierarchy = CGROUP_ROOT / controller
        if not hierarchy.is_dir():
            continue
        parent = _writable_parent(hierarchy / own.get(controller, "/").lstrip("/"))
        if parent is not None:
            parents[controller] = parent
    if {"memory", "pids"} <= set(parents):
        return CgroupSupport(1, parents)
    return None


def limits_description() -> str:
    """What enforces sandbox limits on this machine (for docs, `v1 sandbox list` and errors)."""
    support = cgroup_support()
    return support.describe() if support else "launcher watch (memory, processes) + rlimits (RLIMIT_NPROC, RLIMIT_FSIZE)"


@dataclass
class SandboxCgroups:
    """The cgroups of one sandbox; `join_paths` are the `cgroup.procs` files a launcher joins."""

    support: CgroupSupport
    dirs: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def create(cls, support: CgroupSupport, name: str, memory_bytes: int, max_processes: int) -> SandboxCgroups:
        cgroups = cls(support)
        for controller, parent in support.parents.items():
            path = parent / name
            path.mkdir(exist_ok=True)
            cgroups.dirs[controller] = path
        if support.version == 2:
            path = cgroups.dirs["unified"]
            (path / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(max_processes))
        else:
            (cgroups.dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (cgroups.dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (cgroups.dirs["pids"] / "pids.max").write_text(str(max_processes))
        return cgroups

    @property
    def join_paths(self) -> list[Path]:
        return [path / "cgroup.procs" for path in self.dirs.values()]

    def counters(self) -> dict[str, int]:
        """Monotonic counts of limit hits: {"memory": OOM kills, "pids": refused forks}."""
        if self.support.version == 2:
            path = self.dirs["unified"]
            return {"memory": _field(path / "memory.events", "oom_kill"), "pids": _field(path / "pids.events", "max")}
        return {
            "memory": _field(self.dirs["memory"] / "memory.oom_control", "oom_kill"),
            "pids": _field(self.dirs["pids"] / "pids.events", "max"),
        }

    def kill(self) -> None:
        """SIGKILL every process left in the sandbox's cgroups."""
        for path in self.dirs.values():
            kill_cgroup(path)

    def remove(self) -> None:
        self.kill()
        for path in self.dirs.values():
            remove_cgroup(path)


def _field(path: Path, name: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    return 0


def kill_cgroup(path: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def remove_cgroup(path: Path, wait_seconds: float = 2.0) -> None:
    """Remove a (killed) cgroup, waiting briefly for its processes to be reaped."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            kill_cgroup(path)
            time.sleep(0.02)


def sandbox_cgroup_dirs(name: str) -> list[Path]:
    """The cgroup directories a sandbox called `name` would have (for reaping leftovers)."""
    support = cgroup_support()
    return [parent / name for parent in support.parents.values()] if support else []


__all__ = ["CgroupSupport", "SandboxCgroups", "cgroup_support", "limits_description", "sandbox_cgroup_dirs"]
