"""Real agent CLIs (installed from npm by the harness itself) solve a scripted task in a local sandbox against the
mock model: the mock issues the agent's own tool calls and a call of the rollout's `files` toolset, which the agent
reaches as an MCP server; the agent runs them, the trajectory is captured, and the upstream key never reaches the
sandbox. Each test's findings are checked against docs/agents.json (the source of
the compatibility table in docs/agents.md); `V1_UPDATE_AGENT_TABLE=1` rewrites that file instead."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from harnesses import ClaudeCodeHarness, CodexHarness, GeminiCliHarness, OpenCodeHarness, PiHarness
from harnesses.compat import AgentFinding, check_finding
from tests.tools.patience import HANG_S
from toolsets import files_toolset
from v1.testing import MockModelServer, MockRequest, Reply

SECRET = "sk-upstream-secret-never-in-the-sandbox"
TASK = {"prompt": [{"role": "user", "content": "Write hello into a.txt."}]}
WRITE = "printf hello > a.txt; env > env.txt"
MCP_WRITE = {"path": "b.txt", "content": "via mcp"}


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))
    monkeypatch.setenv("V1_TEST_UPSTREAM_KEY", SECRET)


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def client(mock: MockModelServer, client_type: str = "openai_chat_completions") -> vf.ClientConfig:
    return vf.ClientConfig(client_type=client_type, api_base_url=mock.url, api_key_var="V1_TEST_UPSTREAM_KEY", max_retries=0)


def check_solved(state: vf.State, mock: MockModelServer, mcp: bool) -> dict[str, Any]:
    """The shared assertions; returns the first step's extras."""
    assert state["error"] is None, state["error"]
    assert state["program_result"]["exit_code"] == 0, state["program_result"]
    assert state["artifacts"]["a.txt"] == "hello"
    if mcp:
        assert state["artifacts"]["b.txt"] == "via mcp"  # written by the rollout's own tool, called over MCP
    env = state["artifacts"]["env.txt"]
    assert SECRET not in env and "v1-" in env  # the rollout's own key, never the upstream's
    assert SECRET not in json.dumps(state["program_result"])
    assert len(state["trajectory"]) == len(mock.requests)
    # one tool turn and one answer (no duplicate turns); an agent's side calls (OpenCode's title) have no tools
    steps = [step for step in state["trajectory"] if mock.requests[state["trajectory"].index(step)].tools]
    assert len(steps) == 2
    assert state["completion"][-1]["content"] == "wrote a.txt"
    tool_results = [m for m in steps[1]["prompt"] if m["role"] == "tool"]
    assert len(tool_results) == (2 if mcp else 1)
    assert mcp == any("wrote 7 bytes to b.txt" in json.dumps(m["content"]) for m in tool_results)
    return steps[0]["extras"]


def script_agent(tool_call: Reply) -> Callable[[MockRequest], Reply]:
    """The agent's tool call first, then its answer; a request without tools (a side call) gets a title."""

    def reply(request: MockRequest) -> Reply:
        if not request.tools:
            return Reply.text("A title")
        if any(message.get("role") == "tool" for message in request.messages):
            return Reply.text("wrote a.txt")
        return tool_call

    return reply


def record(finding: AgentFinding) -> None:
    problem = check_finding(finding)
    assert problem is None, problem


AGENTS: dict[str, tuple[Callable[..., vf.Harness], Reply, str]] = {
    "opencode": (
        OpenCodeHarness,
        Reply.tool("bash", {"command": WRITE, "description": "write the file"}).and_tool("v1_write_file", MCP_WRITE),
        "openai_chat_completions",
    ),
    "pi": (PiHarness, Reply.tool("bash", {"command": WRITE}), "openai_chat_completions"),  # Pi has no MCP client
    "codex": (
        CodexHarness,
        Reply.tool("exec_command", {"cmd": WRITE}).and_tool("mcp__v1__write_file", MCP_WRITE),
        "openai_chat_completions",
    ),
    "gemini_cli": (
        GeminiCliHarness,
        Reply.tool("run_shell_command", {"command": WRITE}).and_tool("mcp_v1_write_file", MCP_WRITE),
        "openai_chat_completions",
    ),
    "claude_code": (
        ClaudeCodeHarness,
        Reply.tool("Bash", {"command": WRITE, "description": "write the file"}).and_tool("mcp__v1__write_file", MCP_WRITE),
        "anthropic_messages",
    ),
}


@pytest.mark.parametrize("agent", sorted(AGENTS))
async def test_agent_solves_a_scripted_task_in_a_sandbox(mock: MockModelServer, agent: str) -> None:
    harness_class, tool_call, client_type = AGENTS[agent]
    mcp = any("write_file" in call["name"] for call in tool_call.tool_calls)
    mock.responder = script_agent(tool_call)
    harness = harness_class(
        client=client(mock, client_type),
        model="mock-model",
        timeout_seconds=HANG_S,
        toolsets=[files_toolset()] if mcp else [],
        config={"artifacts": ["a.txt", "env.txt", *(["b.txt"] if mcp else [])]},
    )
    state = await harness.run(TASK)
    extras = check_solved(state, mock, mcp)
    assert all(step["extras"]["stream"] for step in state["trajectory"])
    listed = next(request.tools for request in mock.requests if request.tools)
    tools = [tool["function"]["name"] if "function" in tool else tool["name"] for tool in listed]
    assert {call["name"] for call in tool_call.tool_calls} <= set(tools)
    package = harness.agent_package()  # type: ignore[attr-defined]
    record(
        AgentFinding(
            agent=agent,
            package=package.name,
            registry=package.registry,
            version=package.version,
            dialect=extras["dialect"],
            streaming=extras["stream"],
            tool_calls=True,
            dropped=sorted({w.split("'")[1] for w in extras.get("warnings", []) if "'" in w}),
            mcp=mcp,
        )
    )


async def test_toml_configs_build_the_harnesses() -> None:
    for name, harness_class in (
        ("codex", CodexHarness),
        ("claude_code", ClaudeCodeHarness),
        ("opencode", OpenCodeHarness),
        ("pi", PiHarness),
        ("gemini_cli", GeminiCliHarness),
    ):
        env = vf.load_environment(f"configs/{name}.toml")
        assert type(env.harness) is harness_class
        assert env.harness.config.sandbox is not None and env.harness.config.sandbox.mounts
        assert env.harness.config.program is not None and env.harness.config.program.command == ["sh", ".v1-agent/run.sh"]


TOML_HARNESSES: dict[str, tuple[str, str, Any]] = {
    # loader: (the [env.harness] line, the config field it sets, the value expected there)
    "harnesses.mini_swe_agent:MiniSweAgentHarness": ('version = "2.4.6"', "version", "2.4.6"),
    "harnesses.terminus:TerminusHarness": ("width = 100", "width", 100),
    "harnesses.rlm:RLMHarness": ("max_depth = 1", "max_depth", 1),
    "harnesses.replay:ReplayHarness": ('results = "{results}"', "results", "{results}"),
    "harnesses.openai_agents:OpenAIAgentsHarness": (
        'agent = "tests.harnesses.test_openai_agents_harness:AGENT"\napi = "chat_completions"',
        "api",
        "chat_completions",
    ),
    "harnesses.command:CommandAgentHarness": ('command = ["sh", "-c", "echo hi"]', "command", ["sh", "-c", "echo hi"]),
}


@pytest.mark.parametrize("loader", sorted(TOML_HARNESSES))
def test_every_harness_loads_from_toml(tmp_path: Path, loader: str) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("")
    line, field, expected = TOML_HARNESSES[loader]
    if isinstance(expected, str):
        line, expected = line.format(results=results), expected.format(results=results)
    config = tmp_path / "env.toml"
    config.write_text(
        f"""
[env]
name = "toml_{loader.split(":")[1].lower()}"

[env.taskset]
taskset_id = "reverse_text"
source = "tasksets.reverse_text:load_rows"

[env.harness]
loader = "{loader}"
{line}
"""
    )
    env = vf.load_environment(str(config))
    module, name = loader.split(":")
    assert (type(env.harness).__module__, type(env.harness).__name__) == (module, name)
    assert getattr(env.harness.config, field) == expected
