"""gsm8k, competition_math and math_python: rows load from the local samples; math equivalence separates answers."""

from __future__ import annotations

from pathlib import Path

import pytest

import v1 as vf
from tasksets import competition_math, gsm8k
from tasksets.math_answers import MAX_ANSWER_CHARS, correct_answer, final_answer
from v1.testing import MockModelServer, MockRequest, Reply


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_gsm8k_rows_and_reward() -> None:
    rows = gsm8k.load_rows()
    assert len(rows) == 8 and rows[0]["answer"] == "12" and rows[0]["info"]["solution"].endswith("#### 12")
    assert correct_answer(said(r"42 - 30 = 12, so \boxed{12}"), "12") == 1.0
    assert correct_answer(said("<think>maybe 11</think> 42 - 30 = 12\n#### 12"), "12") == 1.0
    assert correct_answer(said(r"\boxed{12.0}"), "12") == 1.0
    assert correct_answer(said(r"\boxed{11}"), "12") == 0.0
    assert correct_answer(said("I am not sure"), "12") == 0.0
    assert correct_answer([], "12") == 0.0


def test_competition_math_reward_is_math_equivalence() -> None:
    rows = competition_math.load_rows()
    assert rows[1]["answer"] == r"\frac{2}{3}" and rows[1]["info"]["type"] == "Prealgebra"
    assert correct_answer(said(r"so it is \boxed{\dfrac{2}{3}}"), r"\frac{2}{3}") == 1.0
    assert correct_answer(said(r"\boxed{4/6}"), r"\frac{2}{3}") == 1.0
    assert correct_answer(said(r"\boxed{0.7}"), r"\frac{2}{3}") == 0.0
    assert correct_answer(said(r"\boxed{" + "1+" * MAX_ANSWER_CHARS + "1}"), "2") == 0.0  # too long: never parsed
    assert final_answer("no marker 7") == "no marker 7"


def python_then_answer(request: MockRequest) -> Reply:
    """Calls the python tool once, then boxes whatever the tool printed."""
    results = [m for m in request.messages if m["role"] == "tool"]
    if not results:
        return Reply.tool("python", {"code": "import os, math\nprint(math.comb(7, 3), os.getcwd())"})
    return Reply.text(rf"\boxed{{{results[-1]['content'].split()[0]}}}")


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def test_math_python_runs_the_tool_in_a_sandbox(mock: MockModelServer) -> None:
    mock.responder = python_then_answer
    client = {"api_base_url": mock.url, "max_retries": 0}
    env = vf.load_environment("math_python", harness={"client": client, "model": "m", "max_turns": 4})
    [task] = [t for t in env.taskset.tasks() if t["answer"] == "35"]
    state = await env.harness.run(task)
    assert state["error"] is None and state["reward"] == 1.0
    tool_message = next(m for m in state["completion"] if m["role"] == "tool")
    assert tool_message["content"] == "35 /workspace"  # ran in the sandbox's working directory, not the host's
    assert [tool["function"]["name"] for tool in mock.requests[0].tools] == ["python"]
