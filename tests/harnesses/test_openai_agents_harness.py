"""An openai-agents SDK agent as a harness: its own function tool and the rollout's tools (reached over the
endpoint's MCP server) in one turn, every model call through the endpoint, streamed or not; bad agents refused."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

import v1 as vf
from harnesses.compat import AgentFinding, check_finding
from harnesses.openai_agents import OpenAIAgentsHarness
from v1.testing import MockModelServer, MockRequest, Reply

agents = pytest.importorskip("agents")


@agents.function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


AGENT = agents.Agent(name="calculator", instructions="Use the tools.", tools=[add])


def build_agent(task: vf.Task) -> object:
    """A factory: the agent may depend on the task."""
    return AGENT.clone(instructions=f"Use the tools. Task id {task.get('info', {}).get('id')}.")


def lookup(key: str) -> str:
    """Look a key up in the rollout's table."""
    return {"answer": "forty-two"}.get(key, "missing")


def respond(request: MockRequest) -> Reply:
    if request.last_message.get("role") == "tool":
        return Reply.text("The sum is 3 and the answer is forty-two.")
    return Reply.tool("add", {"a": 1, "b": 2}).and_tool("lookup", {"key": "answer"})


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
async def test_an_sdk_agent_uses_its_tools_and_the_rollouts_over_mcp(stream: bool) -> None:
    with MockModelServer(respond) as mock:
        harness = OpenAIAgentsHarness(
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="mock-model",
            toolsets=[vf.Toolset(tools=[lookup])],
            config={"agent": "tests.harnesses.test_openai_agents_harness:build_agent", "stream": stream},
        )
        state = await harness.run({"prompt": "What is 1+2, and the answer?", "info": {"id": 7}})
    assert state["error"] is None, state["error"]
    assert state["final_output"] == "The sum is 3 and the answer is forty-two."
    first, second = state["trajectory"]
    assert first["prompt"][0] == {"role": "system", "content": "Use the tools. Task id 7."}
    assert sorted(tool["function"]["name"] for tool in mock.requests[0].tools) == ["add", "lookup"]
    results = {m["tool_call_id"]: m["content"] for m in second["prompt"] if m["role"] == "tool"}
    calls = {c["function"]["name"]: c["id"] for c in first["completion"][0]["tool_calls"]}
    assert results[calls["add"]] == "3"
    assert "forty-two" in json.dumps(results[calls["lookup"]])  # the rollout's tool, run by v1 over MCP
    assert {step["extras"]["dialect"] for step in state["trajectory"]} == {"responses"}
    assert [step["extras"]["stream"] for step in state["trajectory"]] == [stream, stream]
    if stream:
        finding = AgentFinding(
            agent="openai_agents",
            package="openai-agents",
            registry="pypi",
            version=version("openai-agents"),
            dialect="responses",
            streaming=True,
            tool_calls=True,
            dropped=[],
            mcp=True,
        )
        problem = check_finding(finding)
        assert problem is None, problem


async def test_an_agent_object_and_chat_completions() -> None:
    with MockModelServer(lambda request: Reply.text("hi")) as mock:
        harness = OpenAIAgentsHarness(
            agent=AGENT,
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="m",
            config={"api": "chat_completions"},
        )
        state = await harness.run("hello")
    assert state["error"] is None and state["final_output"] == "hi"
    assert state["trajectory"][0]["extras"]["dialect"] == "chat_completions"


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({}, "field 'agent': required"),
        ({"agent": "no_such_module:agent"}, "cannot import module"),
        ({"agent": "json:__doc__"}, "expected an agents.Agent"),
        ({"agent": "json:dumps", "program": {"base": True}}, "builds its own program"),
        ({"agent": "json:dumps", "sandbox": {}}, "in this process"),
    ],
)
def test_bad_agents_are_one_clear_error(config: dict[str, object], fragment: str) -> None:
    with pytest.raises(vf.ConfigError, match=fragment):
        OpenAIAgentsHarness(config=config)


async def test_a_factory_that_returns_something_else_is_a_program_error() -> None:
    with MockModelServer() as mock:
        harness = OpenAIAgentsHarness(agent=lambda: 42, client=vf.ClientConfig(api_base_url=mock.url), model="m")
        state = await harness.run("hello")
    assert state["error"] is not None and "not an agents.Agent" in state["error"]["message"]
