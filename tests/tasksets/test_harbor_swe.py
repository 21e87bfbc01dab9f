"""harbor and swe: programs run in the local sandbox; the task's own tests give the reward."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tasksets import harbor, swe
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, MockRequest, Reply


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def rewards(module: str, mock: MockModelServer, program: Any) -> list[float]:
    client = {"api_base_url": mock.url, "max_retries": 0}
    env = vf.load_environment(module, harness={"program": program, "client": client, "model": "m"})
    results = await env.evaluate(num_examples=-1, rollouts_per_example=1, max_concurrent=2, state_columns=["test_output"])
    assert [output["error"] for output in results["outputs"]] == [None] * len(results["outputs"])
    assert list_sandboxes() == []
    return [output["reward"] for output in results["outputs"]]


async def test_harbor_oracle_scores_1_and_doing_nothing_scores_0(mock: MockModelServer) -> None:
    assert await rewards("harbor", mock, harbor.ORACLE_PROGRAM) == [1.0, 1.0]
    assert await rewards("harbor", mock, {"command": ["true"]}) == [0.0, 0.0]
    assert mock.requests == []


def solution_writer(request: MockRequest) -> Reply:
    """The 'model' answers each harbor task with its reference solution in a bash block."""
    instruction = request.last_user_text
    task = next(row for row in harbor.load_rows() if row["question"] == instruction)
    return Reply.text(f"Here you go:\n```bash\n{task['info']['solution']}```")


async def test_harbor_agent_runs_the_models_script(mock: MockModelServer) -> None:
    mock.responder = solution_writer
    assert await rewards("harbor", mock, harbor.AGENT_PROGRAM) == [1.0, 1.0]
    assert len(mock.requests) == 2


def test_harbor_task_folder_errors(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "instruction.md").write_text("do it")
    with pytest.raises(vf.TaskError, match=r"missing task\.toml"):
        harbor.load_rows(tmp_path)


async def test_swe_gold_patch_scores_1_and_doing_nothing_scores_0(mock: MockModelServer) -> None:
    assert await rewards("swe", mock, swe.GOLD_PROGRAM) == [1.0, 1.0]
    assert await rewards("swe", mock, {"command": ["true"]}) == [0.0, 0.0]


def patch_writer(request: MockRequest) -> Reply:
    problem = request.last_user_text.split("\n\nRepository files:")[0]
    task = next(row for row in swe.load_rows() if row["question"] == problem)
    return Reply.text(f"```diff\n{task['info']['gold_patch']}```")


async def test_swe_agent_applies_the_models_diff(mock: MockModelServer) -> None:
    mock.responder = patch_writer
    assert await rewards("swe", mock, swe.AGENT_PROGRAM) == [1.0, 1.0]
    assert "def add(a, b)" in mock.requests[0].last_user_text or "def word_count" in mock.requests[0].last_user_text


def test_swe_task_folder_errors(tmp_path: Path) -> None:
    task = tmp_path / "bug"
    for folder in ("repo", "tests"):
        (task / folder).mkdir(parents=True)
    (task / "problem.md").write_text("fix it")
    (task / "task.toml").write_text("command = 'no'\n")
    with pytest.raises(vf.TaskError, match="needs test_command"):
        swe.load_rows(tmp_path)
    (task / "task.toml").write_text("test_command = \n")
    with pytest.raises(vf.TaskError, match="invalid task"):
        swe.load_rows(tmp_path)
