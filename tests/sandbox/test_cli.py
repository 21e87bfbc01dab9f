"""Leftovers: SIGTERM unwinds and deletes; after SIGKILL `v1 sandbox list/reap` finds and deletes them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S, wait_until
from v1.testing import MockModelServer

SCRIPT = """
import asyncio, sys
import v1 as vf

async def main():
    h = vf.Harness(client=vf.ClientConfig(api_base_url=sys.argv[1], max_retries=0), model="m",
                   program={"command": ["sh", "-c", "sleep 300; echo v1-cli-test"]}, sandbox={})
    await h.run("x")

asyncio.run(main())
"""

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def started(tmp_path: Path, mock: MockModelServer) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """A process running a sandboxed command rollout; killed at the end whatever happened."""
    env = {**os.environ, "V1_SANDBOX_ROOT": str(tmp_path / "root"), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, mock.url], env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        yield _wait_started(tmp_path, process), env
    finally:
        process.kill()
        process.wait()


def _wait_started(tmp_path: Path, process: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    ledger = tmp_path / "root" / "ledger"
    wait_until(lambda: ledger.is_dir() and any(ledger.iterdir()) and _sleepers(), "the sandboxed program", process=process)
    return process


def _sleepers() -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid.isdigit() else b""
            if b"v1-cli-test" in cmdline and cmdline.startswith(b"sh"):
                found.append(pid)
        except OSError:
            pass
    return found


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "v1.cli", "sandbox", *args], env=env, cwd=ROOT, capture_output=True, text=True)


def test_sigterm_deletes_the_sandbox(tmp_path: Path, started: tuple[subprocess.Popen[bytes], dict[str, str]]) -> None:
    process, env = started
    process.send_signal(signal.SIGTERM)
    assert process.wait(HANG_S) != 0
    assert _cli(env, "list").stdout.splitlines()[1] == "no sandboxes"
    assert not any((tmp_path / "root" / "local").iterdir())
    assert _sleepers() == []


def test_after_sigkill_list_shows_and_reap_deletes_leftovers(
    tmp_path: Path, started: tuple[subprocess.Popen[bytes], dict[str, str]]
) -> None:
    process, env = started
    process.send_signal(signal.SIGKILL)
    process.wait(HANG_S)
    wait_until(lambda: not _sleepers(), "bwrap to die with its parent (its PID namespace with it)")
    [record] = [json.loads(line) for line in _cli(env, "list", "--json").stdout.splitlines()]
    assert record["backend"] == "local" and record["owner_pid"] == process.pid and not record["owner_alive"]
    reaped = _cli(env, "reap")
    assert reaped.returncode == 0 and f"deleted local sandbox {record['sandbox_id']}" in reaped.stdout
    assert _cli(env, "list", "--json").stdout == ""
    assert not any((tmp_path / "root" / "local").iterdir())
