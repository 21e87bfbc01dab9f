"""Faults inside sandboxes stay inside: limits are recorded on their rollout, others finish, nothing leaks."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import growing_limits
from v1.sandbox import limits_description, list_sandboxes
from v1.testing import MockModelServer

AGENT = (
    'curl -sS --fail-with-body "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    '-H \'Content-Type: application/json\' -d \'{"model": "x", "messages": [{"role": "user", "content": "ok"}]}\''
)


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp dir of this test's own (short, like /tmp: sockets live under it): the sandboxes' run dirs go there.

    The leak checks look only under it, so sandboxes that other processes (another pytest-xdist worker) create
    and delete meanwhile under /tmp are not counted as this test's leaks.
    """
    private = Path(tempfile.mkdtemp(prefix="v1f-"))
    private.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield private
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(autouse=True)
def private_sandbox_root(private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(private_tmp / "sandboxes"))
    return private_tmp / "sandboxes"


def harness(mock: MockModelServer, **kwargs: Any) -> vf.Harness:
    return vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", **kwargs)


def _descendants() -> dict[int, str]:
    """This process's descendants, pid -> name. Under pytest-xdist the worker may also hold processes of
    fixtures that outlive their test (a session-scoped server): compare with a count taken before."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    mine, found = {os.getpid()}, True
    while found:
        found = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                found = True
    names = {}
    for pid in mine - {os.getpid()}:
        try:
            names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
    return names


def _new_descendants(before: dict[int, str]) -> list[str]:
    """The descendants started since `before` was taken that are still alive."""
    return sorted(name for pid, name in _descendants().items() if pid not in before)


def _listening_sockets() -> int:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6", "/proc/net/unix"):
        with open(table) as file:
            for line in file.readlines()[1:]:
                parts = line.split()
                listening = parts[3] == "0A" if "tcp" in table else parts[5] == "01" and parts[3] == "00010000"
                inode = parts[9] if "tcp" in table else parts[6]
                count += listening and inode in inodes
    return count


def _empty(path: Path) -> bool:
    return not any(path.iterdir())


def _mounts() -> list[str]:
    """The mounts under this test's temp dir (the host's mount table is shared with every other process)."""
    return [line for line in Path("/proc/self/mounts").read_text().splitlines() if tempfile.gettempdir() in line]


def _run_dirs() -> set[str]:
    path = Path(tempfile.gettempdir()) / "v1-run"
    return set(os.listdir(path)) if path.is_dir() else set()


async def test_fork_bomb_memory_and_disk_hogs_fail_alone(mock: MockModelServer) -> None:
    programs = {
        "fork": {"command": ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 60"]},
        "memory": {"command": ["python", "-c", "x = bytearray(2 * 1024**3)"]},
        "disk": {"command": ["sh", "-c", "head -c 300000000 /dev/zero > fill; echo unreachable"]},
        "fine": {"command": ["sh", "-c", AGENT]},
    }
    before = _descendants()
    # The fork bomb runs until the timeout and takes CPU from the others (cpu_cores is not enforced
    # locally): the timeout leaves the memory hog room to reach its limit on a busy 2-core machine.
    # On a loaded machine the others may not end within 10 s: then a longer timeout is tried.
    for limit in growing_limits(10):
        h = harness(
            mock,
            program={"command": ["true"]},
            task_programs=programs,
            sandbox={"memory_gb": 0.25, "disk_size_gb": 0.1},
            timeout_seconds=limit,
        )
        states = await h.run_group([{"prompt": name, "program": name} for name in programs])
        by_name = dict(zip(programs, states))
        if not any(by_name[name]["stop_condition"] == "timeout_reached" for name in ("memory", "disk", "fine")):
            break
    for name in ("memory", "disk"):
        error = by_name[name]["error"]
        assert error is not None and error["type"] == "SandboxError", (name, error, by_name[name]["program_result"])
        assert f"hit the sandbox's {name} limit" in error["message"]
    # With cgroups (pids.max) the fork bomb is reported as the pids limit; under rlimits it may
    # only end at its timeout. Either way it ends, and nothing of it is left (below).
    fork = by_name["fork"]
    if limits_description().startswith("cgroup"):
        assert fork["error"] is not None and "hit the sandbox's pids limit" in fork["error"]["message"], fork["error"]
    else:
        assert fork["stop_condition"] in ("timeout_reached", "has_error")
    assert by_name["fine"]["error"] is None and len(by_name["fine"]["trajectory"]) == 1
    assert _new_descendants(before) == []
    assert list_sandboxes() == []


async def test_200_sandboxed_rollouts_at_concurrency_16_leak_nothing(mock: MockModelServer, private_sandbox_root: Path) -> None:
    h = harness(mock, program={"command": ["sh", "-c", AGENT]}, sandbox={})
    await h.run("warm-up")
    mounts, listening, run_dirs, before = _mounts(), _listening_sockets(), _run_dirs(), _descendants()
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> vf.State:
        async with gate:
            return await h.run(f"task {i}")

    states = await asyncio.gather(*(one(i) for i in range(200)))
    assert [s["error"] for s in states if s["error"] is not None] == []
    assert all(len(s["trajectory"]) == 1 for s in states)
    assert _new_descendants(before) == []
    assert _mounts() == mounts
    assert _listening_sockets() == listening
    assert _run_dirs() <= run_dirs
    assert list_sandboxes() == [] and _empty(private_sandbox_root / "local") and _empty(private_sandbox_root / "ledger")
