"""The terminus harness: the tmux terminal agent solves a scripted task in a local sandbox against the mock, typing
shell commands and calling an MCP-backed tool (the units server of toolsets.mcp_example) through the rollout's MCP
server; the screen the model saw is on the trajectory, and the shell never gets the endpoint's key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import v1 as vf
from harnesses.compat import AgentFinding, check_finding
from harnesses.terminus import TerminusHarness
from harnesses.terminus_agent import parse_reply
from tests.tools.patience import HANG_S
from toolsets.mcp_example import units_toolset
from v1.testing import MockModelServer, Reply


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def answer(**reply: object) -> Reply:
    return Reply.text("```json\n" + json.dumps({"analysis": "...", "plan": "...", **reply}) + "\n```")


async def test_terminus_types_commands_reads_the_screen_and_calls_mcp_tools() -> None:
    with MockModelServer() as mock:
        mock.script(
            "I will just talk instead of answering in JSON",
            answer(
                commands=[{"keystrokes": "printf hello > a.txt; env > env.txt; cat a.txt; echo ' done'\n", "duration": 20}],
                tool_calls=[{"name": "convert_units", "arguments": {"value": 2, "from_unit": "km", "to_unit": "m"}}],
                task_complete=False,
            ),
            answer(commands=[], task_complete=True),
        )
        harness = TerminusHarness(
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="mock-model",
            timeout_seconds=HANG_S,
            toolsets=[units_toolset()],
            config={"artifacts": ["a.txt", "env.txt"], "width": 100, "height": 30},
        )
        state = await harness.run({"prompt": "Write hello into a.txt and convert 2 km to m."})
        requests = mock.requests
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["program_result"]["exit_code"] == 0
    assert state["artifacts"]["a.txt"] == "hello"
    assert "OPENAI_API_KEY" not in state["artifacts"]["env.txt"]
    assert len(state["trajectory"]) == len(requests) == 3
    system, first = state["trajectory"][0]["prompt"]
    assert "convert_units" in system["content"] and "Current terminal screen:\n$" in first["content"]
    assert "not usable" in state["trajectory"][1]["prompt"][-1]["content"]  # a reply that is not JSON is sent back
    seen = state["trajectory"][2]["prompt"][-1]["content"]
    assert "2 km = 2000 m" in seen  # the MCP tool's result
    assert "hello done" in seen  # the command's output, on the screen the model saw
    assert json.loads(state["completion"][-1]["content"].strip("`json\n"))["task_complete"] is True
    finding = AgentFinding(
        agent="terminus",
        package="harnesses/terminus_agent.py",
        registry="repo",
        version="in repo",
        dialect=state["trajectory"][0]["extras"]["dialect"],
        streaming=state["trajectory"][0]["extras"]["stream"],
        tool_calls=False,
        dropped=[],
        mcp=True,
    )
    problem = check_finding(finding)
    assert problem is None, problem


def test_terminus_config_is_checked() -> None:
    with pytest.raises(vf.ConfigError, match="width"):
        TerminusHarness(config={"width": 5})
    harness = TerminusHarness(model="m", config={"max_duration": 5})
    assert harness.config.program is not None
    assert "TERMINUS_MAX_DURATION=5.0" in harness.config.program.files[".v1-agent/run.sh"]
    assert "class Terminal" in harness.config.program.files[".v1-agent/terminus.py"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("no json here", "no JSON object"),
        ("[1, 2]", "no JSON object"),
        ('{"commands": {"keystrokes": "ls"}}', "must be a list"),
        ('{"commands": [{"keystrokes": "ls", "duration": "long"}]}', "could not convert"),
    ],
)
def test_unusable_replies_are_told_apart(reply: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_reply(reply)
    assert parse_reply('Sure:\n```json\n{"commands": [{"keystrokes": "ls\\n"}]}\n```')["commands"][0]["duration"] == 1.0
