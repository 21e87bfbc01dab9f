"""The rollout's visible tools as an MCP server on the endpoint: the official MCP client lists and calls them with the
rollout's key once the model asked for a call; other keys, methods, early calls and malformed messages are refused."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import httpx

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, Reply


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def secret_tool() -> str:
    """Hidden from this task."""
    return "hidden"


async def probe(task: vf.Task, state: vf.State) -> None:
    config = state.get_endpoint_config()
    url = config["base_url"].removesuffix("/v1") + "/mcp"
    auth = {"Authorization": f"Bearer {config['api_key']}"}
    found: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        early = {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 1}}}
        found["before_asked"] = (await http.post(url, json=early, headers=auth)).json()["result"]["isError"]
    await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "add"}])
    server = vf.MCPTool(url=url, headers=auth)
    connection = server.connect()
    try:
        found["tools"] = sorted(tool.name for tool in await connection.start())
        result = await connection.call("add", {"a": 2, "b": 3})
        found["sum"] = [block.text for block in result.content]
        hidden = await connection.call("secret_tool", {})
        found["hidden"] = (hidden.is_error, hidden.content[0].text)
    finally:
        await connection.aclose()
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        found["wrong_key"] = (await http.post(url, json={}, headers={"Authorization": "Bearer v1-nope"})).status_code
        found["get"] = (await http.get(url, headers=auth)).status_code
        bad = await http.post(url, content=b"{not json", headers=auth)
        found["bad_json"] = (bad.status_code, bad.json()["error"]["code"])
        note = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=auth)
        found["notification"] = note.status_code
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "resources/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": "x"}},
            {"not": "json-rpc"},
        ]
        answers = (await http.post(url, json=batch, headers=auth)).json()
        found["batch"] = [answer.get("result", answer.get("error", {}).get("code")) for answer in answers]
    state["probe"] = found


async def test_official_mcp_client_lists_and_calls_the_rollouts_visible_tools() -> None:
    with MockModelServer(Reply.tool("add", {"a": 2, "b": 3})) as mock:
        harness = vf.Harness(
            program=probe,
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="m",
            toolsets=[vf.Toolset([add, secret_tool], name="maths")],
        )
        state = await harness.run({"prompt": "hi", "tools": {"hide": ["secret_tool"]}})
    assert state["error"] is None, state["error"]
    found = state["probe"]
    assert found["tools"] == ["add"]
    assert found["sum"] == ["5"]
    assert found["hidden"] == (True, "unknown tool 'secret_tool'; available tools: add")
    assert found["wrong_key"] == 401 and found["get"] == 405
    assert found["bad_json"] == (400, -32700)
    assert found["notification"] == 202
    assert found["batch"] == [{}, -32601, -32602, -32600]
    assert found["before_asked"] is True  # no tool call runs before the model asked for it
    [step] = state["trajectory"]
    assert [call["name"] for call in step["extras"]["mcp_tool_calls"]] == ["add"]


TAG: contextvars.ContextVar[str] = contextvars.ContextVar("caller_tag", default="unset")


def read_tag() -> str:
    """The caller's tag, as a tool sees it."""
    return TAG.get()


async def call_read_tag(task: vf.Task, state: vf.State) -> None:
    config = state.get_endpoint_config()
    await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "tag?"}])
    connection = vf.MCPTool(
        url=config["base_url"].removesuffix("/v1") + "/mcp", headers={"Authorization": f"Bearer {config['api_key']}"}
    ).connect()
    try:
        await connection.start()
        state["seen"] = (await connection.call("read_tag", {})).content[0].text
    finally:
        await connection.aclose()


async def test_the_endpoint_does_not_serve_every_rollout_in_the_context_of_the_one_that_started_it() -> None:
    """Loop-wide parts (the endpoint, upstream pools) are made in a context of their own: made in the first
    rollout's, every later request would run with that rollout's context variables (a logging or tracing
    library's request id; the harness's running state, which kept that rollout's state alive). A tool called
    through the MCP route runs in the context its rollout's program runs in."""
    with MockModelServer(Reply.tool("read_tag", {})) as mock:
        harness = vf.Harness(
            program=call_read_tag,
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="m",
            toolsets=[vf.Toolset([read_tag])],
        )

        async def run_tagged(tag: str) -> vf.State:
            TAG.set(tag)  # in this task's own context
            return await harness.run({"prompt": "hi"})

        first = await asyncio.create_task(run_tagged("first rollout"))  # starts the endpoint
        second = await asyncio.create_task(run_tagged("second rollout"))
    assert first["error"] is None and second["error"] is None
    assert second["seen"] == "second rollout"  # the tool ran in its own rollout's context
