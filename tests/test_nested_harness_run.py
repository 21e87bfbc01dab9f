"""A harness run from inside a running rollout (a tool) borrows that rollout's model and client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply


def reverser(request: MockRequest) -> Reply:
    last = request.last_message
    if last.get("role") == "tool":
        return Reply.text(str(last["content"]))
    if request.tools:
        return Reply.tool(request.tools[0]["function"]["name"], {"text": request.last_user_text})
    return Reply.text(request.last_user_text[::-1])


def test_a_child_harness_run_in_a_tool_borrows_the_parents_model_and_client() -> None:
    child = vf.Harness(max_turns=1)  # no client, no model of its own

    async def ask_child(text: str) -> str:
        """Ask a child rollout to reverse a text."""
        child_state = await child.run(vf.Task({"prompt": text}).freeze())
        assert child_state["error"] is None, child_state["error"]
        return str(child_state["completion"][-1]["content"])

    mock = MockModelServer(reverser).start()
    try:
        taskset = vf.Taskset(source=[{"prompt": "abc", "answer": "cba"}], toolsets=[vf.Toolset(tools=[ask_child])])
        env = vf.Env(taskset, vf.Harness(max_turns=3))
        client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
        state: Any = asyncio.run(env.rollout(env.get_dataset()[0], client, "m"))
    finally:
        mock.stop()
    assert state["error"] is None, state["error"]
    assert [m["role"] for m in state["completion"]] == ["assistant", "tool", "assistant"]
    assert state["completion"][-1]["content"] == "cba"


def test_a_harness_run_outside_any_rollout_still_needs_a_client() -> None:
    with pytest.raises(vf.ConfigError, match="no model client"):
        asyncio.run(vf.Harness(max_turns=1).run(vf.Task({"prompt": "abc"}).freeze()))


def test_a_child_harness_run_in_a_tool_called_through_the_endpoints_mcp_route_borrows_the_parents_model() -> None:
    """A program outside Python (a sandboxed agent) reaches the rollout's tools through the endpoint's MCP route;
    the tool runs in its rollout's context there too, so a child run borrows that rollout's model and client."""
    child = vf.Harness(max_turns=1)

    async def ask_child(text: str) -> str:
        """Ask a child rollout to reverse a text."""
        child_state = await child.run(vf.Task({"prompt": text}).freeze())
        assert child_state["error"] is None, child_state["error"]
        return str(child_state["completion"][-1]["content"])

    async def agent_over_mcp(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        await state.get_client().chat.completions.create(model="any", messages=list(state["prompt"]))
        server = vf.MCPTool(
            url=config["base_url"].removesuffix("/v1") + "/mcp", headers={"Authorization": f"Bearer {config['api_key']}"}
        )
        connection = server.connect()
        try:
            await connection.start()
            result = await connection.call("ask_child", {"text": "abc"})
            state["child_said"] = (result.is_error, [block.text for block in result.content])
        finally:
            await connection.aclose()

    with MockModelServer(reverser) as mock:
        harness = vf.Harness(
            program=agent_over_mcp,
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="parent-model",
            toolsets=[vf.Toolset(tools=[ask_child])],
        )
        state = asyncio.run(harness.run({"prompt": "abc"}))
        models = [request.body["model"] for request in mock.requests]
    assert state["error"] is None, state["error"]
    assert state["child_said"] == (False, ["cba"])
    assert models == ["parent-model", "parent-model"]  # the child's call went out with the parent's model
