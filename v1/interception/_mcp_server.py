"""The rollout's visible tools served to command agents as an MCP server (streamable HTTP, JSON responses).

`POST /r/<rollout>/mcp` takes MCP's JSON-RPC messages (one, or a batch) with the
rollout's key as a bearer token, like its model routes: `initialize`, `ping`,
`tools/list` (the rollout's visible tools, `state["tool_defs"]`) and `tools/call`
(run by the rollout's toolbox, as the base loop would). Requests are answered with
`application/json`; notifications get 202. The server opens no event stream of its
own (`GET` is 405, as the transport allows) and keeps no session state, so an
agent can reconnect at will.

Tool calls made this way are bounded by the model's answers: a `tools/call` runs
only while the rollout's program runs, never before the model's first answer, and
at most as many after an answer as it asked for natively (`tool_calls`); after an
answer that asked for none natively (an agent that reads tool calls from the
answer's text, such as terminus) at most `TEXT_TOOL_CALLS_PER_ANSWER`. Each one
that runs is recorded on the trajectory step whose answer allowed it
(``extras["mcp_tool_calls"]``: name, arguments, content, isError). A batch holds
at most `MAX_BATCH` messages, each counted by the endpoint against the rollout's
in-flight cap like a model call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from v1.errors import RolloutStopped

if TYPE_CHECKING:
    from v1.interception._session import RolloutSession

ROUTE = "/mcp"
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
"""MCP protocol versions this server speaks, newest first."""
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
MAX_BATCH = 16
"""The most JSON-RPC messages one request may batch."""
TEXT_TOOL_CALLS_PER_ANSWER = 16
"""Tool calls that may run after a model answer with no native `tool_calls` (the agent found them in its text)."""


def _error(message_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}


def _result(message_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "result": result}


def _content(value: Any) -> list[dict[str, Any]]:
    """A tool result (text, or OpenAI content parts) as MCP content blocks."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    blocks: list[dict[str, Any]] = []
    for part in value if isinstance(value, list) else [value]:
        kind = part.get("type") if isinstance(part, Mapping) else None
        url = part.get("image_url", {}).get("url", "") if kind == "image_url" else ""
        if url.startswith("data:") and ";base64," in url:
            mime, data = url[5:].split(";base64,", 1)
            blocks.append({"type": "image", "data": data, "mimeType": mime})
        elif kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            blocks.append({"type": "text", "text": str(part)})
    return blocks


def parse_error(message: str) -> dict[str, Any]:
    """The JSON-RPC answer to a body that is not JSON."""
    return _error(None, PARSE_ERROR, message)


def invalid_request(message: str) -> dict[str, Any]:
    """The JSON-RPC answer to a request refused as a whole (a batch too large, too many calls in flight)."""
    return _error(None, INVALID_REQUEST, message)


def list_tools(session: RolloutSession) -> list[dict[str, Any]]:
    """The rollout's visible tools as MCP tool definitions."""
    tools = []
    for tool in session.state.get("tool_defs") or ():
        schema = tool.get("parameters") or {"type": "object", "properties": {}}
        tools.append({"name": tool["name"], "description": tool.get("description") or "", "inputSchema": schema})
    return tools


async def answer(session: RolloutSession, message: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to one message (None for a notification or a response from the client)."""
    if not isinstance(message, Mapping) or message.get("jsonrpc") != "2.0":
        return _error(None, INVALID_REQUEST, "expected a JSON-RPC 2.0 message object")
    method = message.get("method")
    if "id" not in message:
        return None  # notifications (`notifications/initialized`, cancellations) and client responses
    message_id = message["id"]
    raw_params = message.get("params")
    params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        info = {"name": "v1-rollout-tools", "version": "1"}
        return _result(message_id, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info})
    if method == "ping":
        return _result(message_id, {})
    if method == "tools/list":
        return _result(message_id, {"tools": list_tools(session)})
    if method == "tools/call":
        return await _call(session, message_id, params)
    return _error(message_id, METHOD_NOT_FOUND, f"method {method!r} is not served here (tools only)")


async def _call(session: RolloutSession, message_id: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if not isinstance(name, str) or not isinstance(arguments, Mapping):
        return _error(message_id, INVALID_PARAMS, "tools/call needs a string 'name' and an object 'arguments'")
    visible = {tool["name"] for tool in list_tools(session)}
    toolbox = session.state.runtime.toolbox
    if name not in visible or toolbox is None:
        text = f"unknown tool {name!r}; available tools: {', '.join(sorted(visible)) or 'none'}"
        return _refused(message_id, text)
    refusal = _refusal(session)
    if refusal is not None:
        return _refused(message_id, refusal)
    session.tool_calls_made += 1
    made = _call_record(session)
    made.append({"name": name, "arguments": dict(arguments), "content": None, "isError": None})
    calling = toolbox.call(name, dict(arguments))
    context = session.program_context
    try:
        value = await (calling if context is None else asyncio.create_task(calling, context=context.copy()))
    except RolloutStopped as stopped:
        session.state.stop(stopped.condition)
        result = {"content": [{"type": "text", "text": f"the rollout stopped: {stopped.condition}"}], "isError": True}
    else:
        result = {"content": _content(value), "isError": False}
    made[-1].update(result)
    return _result(message_id, result)


def _call_record(session: RolloutSession) -> list[dict[str, Any]]:
    """The list of MCP tool calls on the last recorded step (`extras["mcp_tool_calls"]`), made anew where the
    program removed or replaced it: the program holds its steps, and the count that limits calls is the session's."""
    step = session.last_step
    assert step is not None  # `_refusal` refuses a call before the model's first answer
    extras = step.get("extras")
    if not isinstance(extras, dict):
        extras = step["extras"] = {}
    made = extras.get("mcp_tool_calls")
    if not isinstance(made, list):
        made = extras["mcp_tool_calls"] = []
    return made


def _refused(message_id: Any, text: str) -> dict[str, Any]:
    return _result(message_id, {"content": [{"type": "text", "text": text}], "isError": True})


def _refusal(session: RolloutSession) -> str | None:
    """Why the rollout may not run a tool call now (see the module docs), or None."""
    state = session.state
    if session.closed or not session.recording or state["is_completed"]:
        return f"the rollout stopped: {state['stop_condition'] or 'program_finished'}; no more tool calls"
    if session.last_step is None:
        return "refused: the model has not answered yet; ask the model first"
    # counted by the session, not read from the step: a program holds its steps and may change them
    asked, made = session.tool_calls_asked, session.tool_calls_made
    if asked and made >= asked:
        return f"refused: the model asked for {asked} tool call(s) in its last answer and {made} were made; ask the model first"
    if not asked and made >= TEXT_TOOL_CALLS_PER_ANSWER:
        return (
            f"refused: {made} tool call(s) were made since the model's last answer, which asked for none natively "
            f"(at most {TEXT_TOOL_CALLS_PER_ANSWER}); ask the model again"
        )
    return None


__all__ = [
    "MAX_BATCH",
    "PARSE_ERROR",
    "PROTOCOL_VERSIONS",
    "ROUTE",
    "TEXT_TOOL_CALLS_PER_ANSWER",
    "answer",
    "invalid_request",
    "list_tools",
    "parse_error",
]
