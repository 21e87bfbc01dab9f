"""SandboxEnv and PythonEnv end to end: real bwrap sandboxes, the mock model calling their tools over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, growing_limits
from v1.classic import PythonEnv, SandboxEnv
from v1.cli import main
from v1.sandbox import PrimeBackend, list_sandboxes, register_backend
from v1.testing import MockModelServer, Reply

from .prime_fake import FakePrime

ROWS = [{"question": "work in the sandbox", "answer": "hi"}]


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def client(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


def tool_answers(state: dict[str, Any]) -> list[str]:
    return [str(message["content"]) for message in state["completion"] if message["role"] == "tool"]


async def rollout(env: vf.Environment, mock: MockModelServer) -> dict[str, Any]:
    outputs = await env.generate(ROWS, client(mock), "test-model", state_columns=["sandbox_id"])
    assert len(outputs["outputs"]) == 1
    return dict(outputs["outputs"][0])


async def test_bash_runs_in_the_rollouts_sandbox_which_scoring_still_sees(mock: MockModelServer) -> None:
    seen: dict[str, str] = {}

    async def wrote_the_file(state: vf.State) -> float:
        result = await env.exec_in_sandbox(state["sandbox_id"], ["cat", "f.txt"])
        seen["at_scoring"] = result.stdout
        return float(result.stdout == "hi\n")

    env = SandboxEnv(
        dataset=ROWS,
        environment_vars={"GREETING": "hello"},
        rubric=vf.Rubric(funcs=[wrote_the_file]),
        max_turns=4,
    )
    mock.script(
        Reply.tool("bash", {"command": "echo hi > f.txt; cat f.txt"}),
        Reply.tool("bash", {"command": "cat f.txt; echo $GREETING; pwd; id -u"}),
        Reply.text("done"),
    )
    output = await rollout(env, mock)
    assert output["error"] is None, output["error"]
    assert tool_answers(output) == ["hi", "hi\nhello\n/workspace\n1000"]
    assert output["reward"] == 1.0 and seen["at_scoring"] == "hi\n"
    assert str(output["sandbox_id"]).startswith("v1-")
    offered = mock.requests[0].tools
    assert [tool["function"]["name"] for tool in offered] == ["bash"]
    assert "sandbox_id" not in offered[0]["function"]["parameters"]["properties"]
    assert env.live_sandbox_ids() == [] and list_sandboxes() == []


async def test_each_rollout_gets_its_own_sandbox(mock: MockModelServer) -> None:
    env = SandboxEnv(dataset=ROWS, max_turns=3)
    mock.responder = lambda request: (
        Reply.text("done") if request.last_message.get("role") == "tool" else Reply.tool("bash", {"command": "ls; touch mine"})
    )
    outputs = await env.generate(ROWS, client(mock), "test-model", rollouts_per_example=3, state_columns=["sandbox_id"])
    states = outputs["outputs"]
    assert [tool_answers(dict(state)) for state in states] == [["(no output)"]] * 3
    assert len({state["sandbox_id"] for state in states}) == 3
    assert list_sandboxes() == []


async def test_a_command_past_timeout_per_command_seconds_is_killed_and_the_rollout_goes_on(
    mock: MockModelServer,
) -> None:
    for timeout in growing_limits():  # the limit counts the sandbox's start: on a loaded machine, echo may not run in 1 s
        env = SandboxEnv(dataset=ROWS, timeout_per_command_seconds=timeout, max_turns=3)
        mock.script(
            Reply.tool("bash", {"command": "echo started; sleep 3600"}),
            Reply.tool("bash", {"command": "echo after"}),
            Reply.text("done"),
        )
        output = await rollout(env, mock)
        if tool_answers(output)[0] != f"[timed out after {timeout:g} s; the command was killed]":
            break
    assert output["error"] is None
    assert tool_answers(output) == [f"started\n[timed out after {timeout:g} s; the command was killed]", "after"]


async def test_memory_gb_is_enforced_in_the_tool(mock: MockModelServer) -> None:
    env = SandboxEnv(dataset=ROWS, memory_gb=0.125, max_turns=2)  # type: ignore[arg-type]
    hog = 'python3 -c \'x = bytearray(400 * 1024 * 1024); x[::4096] = b"y" * len(x[::4096]); print("survived")\''
    mock.script(Reply.tool("bash", {"command": hog}), Reply.text("done"))
    output = await rollout(env, mock)
    [answer] = tool_answers(output)
    assert "killed at the sandbox's memory_gb limit" in answer and "survived" not in answer


async def test_a_sandbox_that_fails_to_start_is_a_recorded_rollout_error(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = SandboxEnv(dataset=ROWS, max_turns=2)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to be found
    mock.script(Reply.tool("bash", {"command": "true"}), Reply.text("done"))
    output = await rollout(env, mock)
    assert output["error"] is not None
    assert output["error"]["type"] == "SandboxError"
    assert "needs bubblewrap (`bwrap`), which is not installed" in output["error"]["message"]
    assert mock.requests == []  # the model was never asked
    assert env.live_sandbox_ids() == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"docker_image": "ubuntu:24.04"}, "docker_image='ubuntu:24.04' needs a container backend"),
        ({"timeout_per_command_seconds": -5}, "field 'timeout_per_command_seconds': Input should be greater than 0"),
        ({"memory_gb": 10**12, "backend": "nope"}, "unknown sandbox backend 'nope'"),
    ],
)
async def test_bad_fields_fail_when_the_env_is_built_or_first_used(
    mock: MockModelServer, fields: dict[str, Any], message: str
) -> None:
    try:
        env = SandboxEnv(dataset=ROWS, **fields)
    except vf.ConfigError as exc:
        assert message in str(exc)
        return
    mock.script(Reply.tool("bash", {"command": "true"}), Reply.text("done"))
    output = await rollout(env, mock)
    assert message in output["error"]["message"]


async def test_python_env_keeps_variables_between_calls(mock: MockModelServer) -> None:
    for timeout in growing_limits(2):  # one limit for every cell: on a loaded machine the quick ones may need longer
        env = PythonEnv(dataset=ROWS, timeout_per_command_seconds=timeout, max_turns=6)
        mock.script(
            Reply.tool("python", {"code": "import math\nx = 20"}),
            Reply.tool("python", {"code": "print('value:'); x * 2 + 2"}),
            Reply.tool("python", {"code": "while True: pass"}),
            Reply.tool("python", {"code": "x"}),
            Reply.text("done"),
        )
        output = await rollout(env, mock)
        answers = tool_answers(output)
        if not any(answer.startswith("[timed out") for answer in answers[:2]):
            break
    assert output["error"] is None, output["error"]
    assert answers[:3] == ["(no output)", "value:\n42\n", f"[timed out after {timeout:g} s; the interpreter was stopped]"]
    assert answers[3].startswith("[the interpreter was restarted: earlier variables are gone]")
    assert "NameError: name 'x' is not defined" in answers[3]
    assert [tool["function"]["name"] for tool in mock.requests[0].tools] == ["python"]
    assert list_sandboxes() == []


def test_python_env_refuses_a_backend_without_a_control_channel() -> None:
    with pytest.raises(vf.ConfigError, match="backend='prime' has no control channel"):
        PythonEnv(dataset=ROWS, backend="prime")


@pytest.fixture
async def fake_prime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakePrime]:
    service = await FakePrime().start()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PRIME_API_BASE_URL", service.url)
    monkeypatch.setenv("PRIME_API_KEY", "fake-key")
    register_backend("prime", PrimeBackend)
    yield service
    await service.close()
    register_backend("prime", PrimeBackend)


async def test_on_prime_every_seed_field_reaches_the_sdk(mock: MockModelServer, fake_prime: FakePrime) -> None:
    env = SandboxEnv(
        dataset=ROWS,
        backend="prime",
        sandbox_name="remote-env",
        docker_image="ubuntu:24.04",
        start_command="sleep infinity",
        cpu_cores=2,
        memory_gb=4,
        disk_size_gb=20,
        gpu_count=0,  # the SDK wants a gpu_type for more, which neither the seed nor SandboxConfig has
        timeout_minutes=30,
        timeout_per_command_seconds=7,
        environment_vars={"GREETING": "remote"},
        team_id="team-1",
        advanced_configs={"feature": True},
        labels=["mine"],
        max_turns=2,
    )
    mock.script(Reply.tool("bash", {"command": "echo $GREETING"}), Reply.text("done"))
    output = await rollout(env, mock)
    assert output["error"] is None, output["error"]
    assert tool_answers(output) == ["remote"]
    [request] = fake_prime.requests
    assert (request.docker_image, request.cpu_cores, request.memory_gb, request.disk_size_gb) == ("ubuntu:24.04", 2, 4, 20)
    assert (request.gpu_count, request.timeout_minutes, request.team_id) == (0, 30, "team-1")
    assert request.start_command is not None and request.environment_vars == {"GREETING": "remote"}
    assert request.advanced_configs is not None and request.advanced_configs.model_dump() == {"feature": True}
    assert {"name:remote-env", "mine"} <= set(request.labels)
    assert fake_prime.deleted == [output["sandbox_id"]]


ENV_MODULE = """
import v1 as vf


def ran_in_sandbox(completion) -> float:
    return float([m["content"] for m in completion if m["role"] == "tool"] == ["/workspace"])


def load_environment(**kwargs):
    return vf.SandboxEnv(
        eval_dataset=[{{"question": "where are you?"}}] * 2,
        rubric=vf.Rubric(funcs=[ran_in_sandbox]),
        max_turns=3,
        {extra}
    )
"""


def bash_then_answer(request: Any) -> Reply:
    return Reply.text("done") if request.last_message.get("role") == "tool" else Reply.tool("bash", {"command": "pwd"})


def eval_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, extra: str = "") -> str:
    (tmp_path / f"{name}.py").write_text(ENV_MODULE.format(extra=extra))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_v1_eval_runs_a_sandbox_env_module(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mock.responder = bash_then_answer
    module = eval_module(tmp_path, monkeypatch, "classic_bash_env_ok")
    args = ["eval", module, "-m", "mock-model", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", str(tmp_path / "out")]
    assert main([*args, "--state-columns", "sandbox_id"]) == 0
    [results] = list((tmp_path / "out").rglob("results.jsonl"))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1.0, 1.0]
    assert len({row["sandbox_id"] for row in rows}) == 2
    assert list_sandboxes() == []


def test_v1_eval_refuses_an_image_on_the_local_backend_in_one_line(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = eval_module(tmp_path, monkeypatch, "classic_bash_env_image", extra='docker_image="ubuntu:24.04",')
    code = main(["eval", module, "-m", "mock-model", "-b", mock.url, "--output-dir", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip()
    assert code == 2
    assert "docker_image='ubuntu:24.04' needs a container backend" in error and len(error.splitlines()) == 1
    assert not (tmp_path / "out").exists() and mock.requests == []


async def test_timeout_minutes_deletes_the_sandbox_and_the_tool_says_so(mock: MockModelServer) -> None:
    for seconds in growing_limits(1.2):  # the first command must run before the limit: on a loaded machine, try longer
        minutes = round(seconds / 60, 4)  # 0.02 first
        env = SandboxEnv(dataset=ROWS, timeout_minutes=minutes, max_turns=3)  # type: ignore[arg-type]
        mock.script(
            Reply.tool("bash", {"command": "echo early"}),
            Reply.tool("bash", {"command": "echo late"}, delay=2.5 * seconds),
            Reply.text("done"),
        )
        output = await rollout(env, mock)
        early, late = tool_answers(output)
        if early == "early":
            break
    assert early == "early"
    assert f"is gone: it reached timeout_minutes={minutes:g} and was deleted" in late
    assert list_sandboxes() == [] and env.live_sandbox_ids() == []


async def test_huge_output_is_clipped(mock: MockModelServer) -> None:
    env = SandboxEnv(dataset=ROWS, max_turns=2)
    mock.script(Reply.tool("bash", {"command": "head -c 3000000 /dev/zero | tr '\\\\0' x; echo END"}), Reply.text("done"))
    [answer] = tool_answers(await rollout(env, mock))
    assert len(answer) < 17_000 and answer.endswith("END") and "characters cut" in answer


async def test_python_env_clips_huge_output_and_survives_hostile_cells(mock: MockModelServer) -> None:
    env = PythonEnv(dataset=ROWS, max_turns=4)
    mock.script(
        Reply.tool("python", {"code": "print('x' * 3_000_000); print('END')"}),
        Reply.tool("python", {"code": "import sys; sys.stdout = None; raise KeyboardInterrupt"}),
        Reply.tool("python", {"code": "'still here'"}),
        Reply.text("done"),
    )
    huge, hostile, after = tool_answers(await rollout(env, mock))
    assert len(huge) < 17_000 and huge.endswith("END\n") and "characters cut" in huge
    assert "KeyboardInterrupt" in hostile
    assert after == "'still here'\n"


async def test_a_model_naming_another_sandbox_still_gets_its_own(mock: MockModelServer) -> None:
    env = SandboxEnv(dataset=ROWS, max_turns=3)
    victim: dict[str, Any] = {}
    await env.create_sandbox(victim)  # another rollout's live sandbox
    await env.exec_in_sandbox(victim["sandbox_id"], ["sh", "-c", "echo secret > s.txt"])
    try:
        mock.script(Reply.tool("bash", {"command": "cat s.txt", "sandbox_id": victim["sandbox_id"]}), Reply.text("done"))
        output = await rollout(env, mock)
    finally:
        await env.delete_sandbox(victim)
    [answer] = tool_answers(output)
    assert "secret" not in answer and "No such file" in answer
    assert output["sandbox_id"] != victim["sandbox_id"]


def test_v1_eval_on_ray_runs_sandbox_env_rollouts_on_an_actor(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mock.responder = bash_then_answer
    module = eval_module(tmp_path, monkeypatch, "classic_bash_env_ray")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tmp_path)])}
    command = [sys.executable, "-m", "v1.cli", "eval", module, "-m", "mock-model", "-b", mock.url, "-n", "2", "-r", "1"]
    command += ["--output-dir", str(tmp_path / "out"), "--state-columns", "sandbox_id", "--ray", "--ray-actors", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    [results] = list((tmp_path / "out").rglob("results.jsonl"))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1.0, 1.0] and len({row["sandbox_id"] for row in rows}) == 2
    assert list_sandboxes() == []  # the actor deleted its sandboxes (same V1_SANDBOX_ROOT ledger)
