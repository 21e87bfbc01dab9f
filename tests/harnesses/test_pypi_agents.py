"""Python agents as harnesses: mini-SWE-agent (installed from PyPI into a venv of its own by the harness) solves a
scripted task in a local sandbox against the mock model, which issues the agent's own `bash` actions; the trajectory
is captured and the upstream key never reaches the sandbox. Findings go to docs/agents.json like the npm agents'."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import v1 as vf
from harnesses.compat import AgentFinding, check_finding
from harnesses.mini_swe_agent import LITELLM, TRAJECTORY_FILE, MiniSweAgentHarness
from harnesses.pypi import PypiPackage
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply

SECRET = "sk-upstream-secret-never-in-the-sandbox"
WRITE = "printf hello > a.txt; env > env.txt"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))
    monkeypatch.setenv("V1_TEST_UPSTREAM_KEY", SECRET)


def record(finding: AgentFinding) -> None:
    problem = check_finding(finding)
    assert problem is None, problem


def mini_actions(request: MockRequest) -> Reply:
    """mini's loop: a bash action, then (having seen its output) the submit action that ends the run."""
    if any(message.get("role") == "tool" for message in request.messages):
        return Reply.tool("bash", {"command": SUBMIT}, content="The file is written; submitting.")
    return Reply.tool("bash", {"command": WRITE}, content="I will write the file.")


async def test_mini_swe_agent_solves_a_scripted_task_in_a_sandbox() -> None:
    with MockModelServer(mini_actions) as mock:
        harness = MiniSweAgentHarness(
            client=vf.ClientConfig(api_base_url=mock.url, api_key_var="V1_TEST_UPSTREAM_KEY", max_retries=0),
            model="mock-model",
            timeout_seconds=HANG_S,
            config={"artifacts": ["a.txt", "env.txt", {"path": TRAJECTORY_FILE, "format": "json"}]},
        )
        state = await harness.run({"prompt": "Write hello into a.txt.", "system_prompt": "Be brief {{ not a template }}."})
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["program_result"]["exit_code"] == 0, state["program_result"]
    assert state["artifacts"]["a.txt"] == "hello"
    env = state["artifacts"]["env.txt"]
    assert SECRET not in env and "v1-" in env  # the rollout's own key, never the upstream's
    assert SECRET not in json.dumps(state["program_result"])
    first, second = state["trajectory"]
    assert len(mock.requests) == 2
    assert first["prompt"][0] == {"role": "system", "content": "Be brief {{ not a template }}."}
    assert "Write hello into a.txt." in first["prompt"][1]["content"]  # inside mini's instance template
    assert [tool["function"]["name"] for tool in mock.requests[0].tools] == ["bash"]
    tool_result = second["prompt"][-1]
    assert tool_result["role"] == "tool" and '"returncode": 0' in tool_result["content"]
    assert json.loads(second["completion"][-1]["tool_calls"][0]["function"]["arguments"]) == {"command": SUBMIT}
    # mini's own trajectory: the same conversation, ending with its submission
    mini = state["artifacts"][TRAJECTORY_FILE]
    assert mini["info"]["exit_status"] == "Submitted" and mini["info"]["mini_version"] == harness.agent_package().version
    package = harness.agent_package()
    assert isinstance(package, PypiPackage)
    extras = first["extras"]
    record(
        AgentFinding(
            agent="mini_swe_agent",
            package=package.name,
            registry=package.registry,
            version=package.version,
            dialect=extras["dialect"],
            streaming=extras["stream"],
            tool_calls=True,
            dropped=[],
            mcp=False,  # mini-SWE-agent has no MCP client
        )
    )


def test_other_backends_install_the_agent_with_the_sandboxs_pip() -> None:
    agent = MiniSweAgentHarness(model="m", sandbox={"backend": "prime", "scope": "group"})
    sandbox, program = agent.config.sandbox, agent.config.program
    assert sandbox is not None and sandbox.mounts == {} and sandbox.packages == ["mini-swe-agent==2.4.6", LITELLM]
    assert program is not None and program.env["V1_AGENT_PYTHON"] == "python"
    local = MiniSweAgentHarness(model="m", config={"version": "2.4.5"})
    assert local.config.program is not None
    assert local.config.program.env["V1_AGENT_PYTHON"].startswith("/opt/v1-npm/pypi/mini-swe-agent@2.4.5-py")


async def test_a_failed_install_is_one_error_and_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_AGENT_CACHE", str(tmp_path / "cache"))
    package = PypiPackage("mini-swe-agent", "2.4.6", pins=("not a requirement ((",))  # pip refuses it before any download
    with pytest.raises(vf.ProgramError, match=r"pip install mini-swe-agent==2\.4\.6 .* exited \d+: .*requirement"):
        await package.install(timeout=HANG_S)
    leftovers = await asyncio.to_thread(lambda: list((tmp_path / "cache").rglob("mini-swe-agent@*")))
    assert not package.installed() and leftovers == []
