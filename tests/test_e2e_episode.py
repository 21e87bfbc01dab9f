"""Episodes of roles end to end: a policy with a judge, a simulated user and best-of-n, against the
mock model server over HTTP and real local sandboxes; each role on an endpoint session of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.env import ResultsWriter
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, MockRequest, Reply

JUDGE_MARK = "You are judging an attempt"


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def bash(command: str, sandbox: Any) -> str:
    """Run a shell command in the sandbox."""
    result = await sandbox.exec(["sh", "-c", command], timeout=HANG_S)
    return result.stdout + result.stderr


def sandboxed_harness(**kwargs: Any) -> vf.Harness:
    """A base-loop harness with a bash tool in its own rollout sandbox (and the episode's client and model)."""
    return vf.Harness(sandbox={}, toolsets=[vf.Toolset([bash], sandbox="program")], **kwargs)


def prompts_of(record: dict[str, Any]) -> str:
    return json.dumps([step["prompt"] for step in record["trajectory"]])


def completions_of(record: dict[str, Any]) -> str:
    return json.dumps([step["completion"] for step in record["trajectory"]])


def judge_and_policy(request: MockRequest) -> Reply:
    """The policy writes answer.txt; the judge reads it in its own sandbox and scores what it read."""
    first_user = next(m for m in request.messages if m["role"] == "user")
    if JUDGE_MARK in str(first_user["content"]):
        if request.last_message["role"] != "tool":
            return Reply.tool("bash", {"command": "cat answer.txt; ls"})
        seen = str(request.last_message["content"])
        correct = 1 if seen.startswith("42\n") else 0
        return Reply.text(f'I read the file. {{"correct": {correct}, "tidy": 0.5}}')
    if request.last_message["role"] != "tool":
        return Reply.tool("bash", {"command": "echo 42 > answer.txt; echo scratch > notes.txt"})
    return Reply.text("The answer is in answer.txt")


def judged_env(mode: str = "isolated") -> vf.Env:
    control = vf.JudgeControl(
        criteria={"correct": "answer.txt holds the right answer", "tidy": "the workspace is tidy"},
        weights={"correct": 1.0, "tidy": 2.0},
        mode=mode,
        files=["answer.txt"] if mode == "isolated" else [],
    )
    roles = {"policy": sandboxed_harness(max_turns=4), "judge": sandboxed_harness(max_turns=4)}
    taskset = vf.Taskset(source=[{"prompt": "Write the answer to 6*7 into answer.txt", "answer": "42"}])
    return vf.Env(taskset, vf.EpisodeHarness(roles, control))


async def test_an_isolated_judge_reads_the_policys_file_in_its_own_sandbox_and_its_verdict_is_the_reward(
    mock: MockModelServer, tmp_path: Path
) -> None:
    mock.responder = judge_and_policy
    env = judged_env()
    writer = ResultsWriter(tmp_path / "run")
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    outputs = await env.evaluate(client, "test-model", results=writer)
    [output] = outputs["outputs"]
    assert output["error"] is None, output["error"]
    assert output["metrics"]["judge/correct"] == 1.0 and output["metrics"]["judge/tidy"] == 0.5
    assert output["reward"] == 1.0 * 1.0 + 2.0 * 0.5
    policy, judge = output["roles"]["policy"], output["roles"]["judge"]
    assert (policy["trainable"], judge["trainable"]) == (True, False)
    # each role on its own endpoint session: the judge's calls are in its trajectory only
    assert JUDGE_MARK not in prompts_of(policy) and JUDGE_MARK in prompts_of(judge)
    assert "cat answer.txt" not in completions_of(policy) and "cat answer.txt" in completions_of(judge)
    assert len(policy["trajectory"]) == 2 and len(judge["trajectory"]) == 2
    assert policy["trajectory_id"] != judge["trajectory_id"]
    # isolated: only the named file was restored; the policy's scratch file stayed behind
    judge_tool_output = judge["trajectory"][1]["prompt"][-1]["content"]
    assert judge_tool_output.splitlines() == ["42", "answer.txt"]
    assert output["completion"][-1]["content"] == "The answer is in answer.txt"
    saved = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert set(saved[0]["roles"]) == {"policy", "judge"}
    assert saved[0]["roles"]["judge"]["trajectory"] == judge["trajectory"]
    assert list_sandboxes() == []


async def test_a_shared_judge_works_in_the_policys_sandbox_after_the_policy_ended(mock: MockModelServer) -> None:
    mock.responder = judge_and_policy
    env = judged_env("shared")
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    state: Any = await env.rollout(env.get_dataset()[0], client, "test-model")
    assert state["error"] is None, state["error"]
    judge = state["roles"]["judge"]
    # shared: the judge sees the policy's whole workspace, scratch file included
    assert judge["trajectory"][1]["prompt"][-1]["content"].splitlines() == ["42", "answer.txt", "notes.txt"]
    assert state["metrics"]["judge/correct"] == 1.0
    assert JUDGE_MARK not in prompts_of(state["roles"]["policy"])
    assert list_sandboxes() == []
