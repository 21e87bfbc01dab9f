"""Unsandboxed commands die with `v1 eval` (O1), and large task values reach a command (C2).

C2: a 200 KB task field bound with `env.Q` failed `execve` (E2BIG) on the host and in the
sandbox, blamed on the program. Now it is refused in one line naming the variable before
anything runs, and the same value reaches the command as a file or on stdin.

O1: a command program that leaves children behind (in its group, or in a session of its own)
outlived a SIGKILL of `v1 eval`. Now each host command runs under a reaper that the kernel tells
when v1 dies, and that kills everything under it.

Round 3, finding 13: the command killed its reaper (found by its command line in /proc) and left a
process in a session of its own, which outlived the rollout and v1. Now, as root, the command runs
in a PID namespace of its own, where the reaper's pid means nothing.
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

import v1 as vf
from tests.tools.patience import HANG_S, wait_until
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


def _holding(marker: str) -> list[int]:
    """The host pids of the live processes whose command line holds `marker`.

    A command may run in a PID namespace of its own, where `$$` and `$!` are pids the host doesn't know,
    so the test finds its processes by what they run, through the host's /proc."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in argv and int(pid) != os.getpid() and _alive(int(pid)):
            found.append(int(pid))
    return found


def _sleeping(marker: str) -> list[int]:
    """The marked processes that run `sleep`: the children a program left."""
    return [pid for pid in _holding(marker) if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0")]


def test_o1_an_unsandboxed_command_and_all_it_started_die_with_a_killed_v1_eval(tmp_path: Path, mock: MockModelServer) -> None:
    started = tmp_path / "started"
    duration = f"600.{os.getpid()}{time.monotonic_ns() % 10**6}"  # each process's command line holds it
    # The program leaves a child in its group and one in a session of its own, then waits.
    script = f"sleep {duration} & echo 1 >> {started}; setsid sleep {duration} & echo 1 >> {started}; wait"
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
    args = [sys.executable, "-m", "v1.cli", "eval", "eval.toml", "-m", "m", "-b", mock.url, "-n", "2", "-r", "1"]
    process = subprocess.Popen(
        [*args, "--output-dir", "out"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        try:
            wait_until(lambda: len(_sleeping(duration)) == 4, "the programs' processes", process=process)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {process.stderr.read().decode()[-2000:]}" if process.poll() is not None else exc
            ) from None
        assert len(started.read_text().split()) == 4  # two rollouts, two children each
        assert len(_holding(duration)) > 4  # the shells and v1's reapers too
        process.send_signal(signal.SIGKILL)
        process.wait(HANG_S)
        wait_until(lambda: not _holding(duration), "the programs' processes to die with v1 eval")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(HANG_S)
        for pid in _holding(duration):
            os.kill(pid, signal.SIGKILL)


KILL_THE_REAPER = """
import os, signal, subprocess, sys
marker = sys.argv[1]
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if any(b"_host_reaper" in part for part in argv) and marker.encode() in argv:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker + "-left"], start_new_session=True)
"""


def _marked(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv and _alive(int(pid)):
            found.append(int(pid))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of the command's own needs root (CI runs as root)")
async def test_r13_a_command_that_kills_its_reaper_leaves_nothing_behind(tmp_path: Path, mock: MockModelServer) -> None:
    marker = f"v1-r13-{os.getpid()}-{tmp_path.name}"
    harness = vf.Harness(
        program={"command": [sys.executable, "-c", KILL_THE_REAPER, marker]},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=HANG_S,
    )
    try:
        state = await harness.run(vf.Task({"prompt": [{"role": "user", "content": "hi"}]}))
        assert state["error"] is None, state["error"]
        wait_until(lambda: not _marked(marker + "-left"), "the process the command left to die with its rollout")
    finally:
        for pid in _marked(marker + "-left"):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


BIG = "q" * 200_000


def _harness(mock: MockModelServer, where: str, command: str, bindings: dict[str, str]) -> vf.Harness:
    return vf.Harness(
        program={"command": ["sh", "-c", command], "bindings": bindings},
        sandbox={"memory_gb": 1} if where == "sandbox" else None,
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=HANG_S,
    )


@pytest.mark.parametrize("where", ["host", "sandbox"])
async def test_c2_a_200_kb_task_field_bound_to_env_is_one_line_and_the_others_run(mock: MockModelServer, where: str) -> None:
    h = _harness(mock, where, 'printf %s "$Q" | wc -c', {"env.Q": "task.info.q"})
    big, small = await h.run_group([{"prompt": "a", "info": {"q": BIG}}, {"prompt": "b", "info": {"q": "small"}}])
    assert big["error"] is not None and big["error"]["type"] == "ProgramError", big["error"]
    assert big["error"]["message"] == (
        "program env 'Q' is 200003 bytes; one variable holds at most 131072 bytes: "
        "pass a large value as a file ('files.NAME' binding) or on stdin ('stdin' binding)"
    )
    assert "program_result" not in big
    assert small["error"] is None and small["program_result"]["stdout"].strip() == "5"


@pytest.mark.parametrize("where", ["host", "sandbox"])
@pytest.mark.parametrize(
    ("command", "bindings"),
    [("wc -c < q.txt", {"files.q.txt": "task.info.q"}), ("wc -c", {"stdin": "task.info.q"})],
    ids=["file", "stdin"],
)
async def test_c2_a_200_kb_task_field_reaches_the_command_as_a_file_or_on_stdin(
    mock: MockModelServer, where: str, command: str, bindings: dict[str, str]
) -> None:
    state = await _harness(mock, where, command, bindings).run({"prompt": "a", "info": {"q": BIG}})
    assert state["error"] is None and state["program_result"]["stdout"].strip() == str(len(BIG))


@pytest.mark.parametrize("where", ["host", "sandbox"])
async def test_c2_200_kb_arguments_from_a_row_reach_the_command(mock: MockModelServer, where: str) -> None:
    h = _harness(mock, where, 'echo "${#0} ${#1}"', {})
    state = await h.run({"prompt": "a", "program": {"args": ["a" * 100_000, "b" * 100_000]}})
    assert state["error"] is None and state["program_result"]["stdout"] == "100000 100000\n"
