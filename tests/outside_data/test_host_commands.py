"""Unsandboxed commands die with `v1 eval` (O1), and large task values reach a command (C2).

O1: a command program that leaves children behind (in its group, or in a session of its own)
outlived a SIGKILL of `v1 eval`. Now each host command runs under a reaper that the kernel tells
when v1 dies, and that kills everything under it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from v1.testing import MockModelServer

ROOT = Path(__file__).resolve().parents[2]
ROWS_SOURCE = """
def load_rows():
    return [{"prompt": "one"}, {"prompt": "two"}]
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_o1_an_unsandboxed_command_and_all_it_started_die_with_a_killed_v1_eval(tmp_path: Path, mock: MockModelServer) -> None:
    pids = tmp_path / "pids"
    # The program leaves a child in its group and one in a session of its own, then waits.
    script = f"echo $$ >> {pids}; sleep 600 & echo $! >> {pids}; setsid sleep 600 & echo $! >> {pids}; wait"
    (tmp_path / "rows_src.py").write_text(ROWS_SOURCE)
    config = f"""
        [env]
        name = "orphans"
        [env.taskset]
        taskset_id = "orphans"
        source = "rows_src:load_rows"
        [env.harness]
        timeout_seconds = 900
        [env.harness.program]
        command = ["sh", "-c", {json.dumps(script)}]
    """
    (tmp_path / "eval.toml").write_text(textwrap.dedent(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    args = [sys.executable, "-m", "v1.cli.main", "eval", "eval.toml", "-m", "m", "-b", mock.url, "-n", "2", "-r", "1"]
    process = subprocess.Popen(
        [*args, "--output-dir", "out"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        started = _wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 6, 120)
        assert started, process.stderr.read().decode()[-2000:] if process.poll() is not None else "no program started"
        left = [int(pid) for pid in pids.read_text().split()]
        assert all(_alive(pid) for pid in left)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        assert _wait_for(lambda: not any(_alive(pid) for pid in left), 30), [pid for pid in left if _alive(pid)]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))
