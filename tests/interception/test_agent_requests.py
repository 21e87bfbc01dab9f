"""What real agent CLIs send (Codex's namespaced, custom and hosted tools; Claude Code's system turns,
thinking signatures, failed tool results, `count_tokens`) is accepted, translated and rendered back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import resolve_client
from v1.interception import RolloutSession, get_endpoint, upstream
from v1.testing import MockModelServer, Reply

CODEX_TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
    {
        "type": "namespace",
        "name": "agents",
        "description": "sub-agents",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {}}}],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Patch files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
    },
    {"type": "web_search", "external_web_access": False},
]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


async def open_rollout(mock: MockModelServer, client_type: str = "openai_chat_completions") -> tuple[vf.State, RolloutSession]:
    endpoint = await get_endpoint()
    state = vf.State.for_task({"prompt": "hi"})
    config = vf.ClientConfig(client_type=client_type, api_base_url=mock.url, max_retries=0, preserve_all_thinking=True)
    upstream(state).client = await resolve_client(config)
    state.runtime.model = "m"
    return state, endpoint.open(state)


def sse_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


async def post(session: RolloutSession, route: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        return await http.post(
            f"{session.base_url}{route}", headers={"Authorization": f"Bearer {session.api_key}"}, json=body, timeout=HANG_S
        )


@pytest.mark.parametrize("stream", [False, True])
async def test_codex_tools_are_flattened_for_the_upstream_and_calls_rendered_back(mock: MockModelServer, stream: bool) -> None:
    state, session = await open_rollout(mock)
    mock.script(Reply.tool("agents__spawn", {}).and_tool("apply_patch", {"input": "*** Begin Patch"}))
    body = {"model": "m", "input": "go", "tools": CODEX_TOOLS, "stream": stream}
    response = await post(session, "/responses", body)
    assert response.status_code == 200, response.text
    if stream:
        events = sse_events(response.text)
        done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
        added = [event["item"] for event in events if event["type"] == "response.output_item.added"]
        assert all("flat_name" not in item for item in added)
        assert events[-1]["type"] == "response.completed"
        assert events[-1]["response"]["output"] == done
    else:
        done = response.json()["output"]
    assert [(item["type"], item.get("namespace"), item["name"]) for item in done] == [
        ("function_call", "agents", "spawn"),
        ("custom_tool_call", None, "apply_patch"),
    ]
    assert done[1]["input"] == "*** Begin Patch"
    sent = mock.requests[0].tools
    assert [tool["function"]["name"] for tool in sent] == ["exec_command", "agents__spawn", "apply_patch"]
    assert sent[2]["function"]["parameters"]["required"] == ["input"]
    assert "start: /.+/" in sent[2]["function"]["description"]
    [step] = state["trajectory"]
    assert step["extras"]["warnings"] == [
        "tools[3]: tool type 'web_search' dropped: it runs on the provider's servers, not the upstream model"
    ]


async def test_codex_history_items_are_translated(mock: MockModelServer) -> None:
    state, session = await open_rollout(mock)
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "opaque"},
        {"type": "function_call", "namespace": "agents", "name": "spawn", "call_id": "c1", "arguments": "{}"},
        {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c2", "input": "patch text"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "patched"},
    ]
    response = await post(session, "/responses", {"model": "m", "input": history, "tools": CODEX_TOOLS})
    assert response.status_code == 200, response.text
    messages = mock.requests[0].messages
    calls = messages[1]["tool_calls"]
    assert [call["function"]["name"] for call in calls] == ["agents__spawn", "apply_patch"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"input": "patch text"}
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in messages[2:]] == [
        ("tool", "c1", "spawned"),
        ("tool", "c2", "patched"),
    ]
    warnings = state["trajectory"][0]["extras"]["warnings"]
    assert warnings[0].startswith("input[4]: web_search_call item dropped")


async def test_claude_code_system_turns_server_tools_and_failed_results(mock: MockModelServer) -> None:
    state, session = await open_rollout(mock, "anthropic_messages")
    body = {
        "model": "m",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "system", "content": [{"type": "text", "text": "# Environment"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-A"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "false"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "exit 1", "is_error": True}],
            },
        ],
        "tools": [
            {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
    }
    response = await post(session, "/messages", body)
    assert response.status_code == 200, response.text
    sent = mock.requests[0].body
    assert sent["system"] == "be brief"
    assert sent["messages"][0]["content"][-1] == {"type": "text", "text": "# Environment"}  # joins the user turn
    assistant = sent["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "plan", "signature": "sig-A"}
    assert sent["messages"][2]["content"][0]["is_error"] is True
    assert [tool["name"] for tool in sent["tools"]] == ["Bash"]
    prompt = state["trajectory"][0]["prompt"]
    assert prompt[2]["role"] == "system" and prompt[-1]["is_error"] is True
    assert [w.split(":")[0] for w in state["trajectory"][0]["extras"]["warnings"]] == ["messages[2].content[1]", "tools[1]"]


async def test_thinking_signature_streams_back_to_an_anthropic_sdk(mock: MockModelServer) -> None:
    state, session = await open_rollout(mock, "anthropic_messages")
    mock.script(Reply.text("done", reasoning_content="thought", reasoning_signature="sig-upstream"))
    client = anthropic.AsyncAnthropic(base_url=session.base_url.removesuffix("/v1"), api_key=session.api_key, max_retries=0)
    async with client.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}]) as stream:
        final = await stream.get_final_message()
    await client.close()
    thinking = final.content[0]
    assert thinking.type == "thinking" and thinking.signature == "sig-upstream"
    assert state["trajectory"][0]["completion"][0]["reasoning_signature"] == "sig-upstream"


async def test_count_tokens_estimates_without_a_model_call(mock: MockModelServer) -> None:
    state, session = await open_rollout(mock)
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}]}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        url = f"{session.base_url}/messages/count_tokens"
        good = await http.post(url, headers={"x-api-key": session.api_key}, json=body)
        wrong_key = await http.post(url, headers={"x-api-key": "v1-nope"}, json=body)
        bad = await http.post(url, headers={"x-api-key": session.api_key}, json={"model": "m", "messages": 5})
        wrong_method = await http.get(url, headers={"x-api-key": session.api_key})
    assert good.status_code == 200 and 100 <= good.json()["input_tokens"] <= 130
    assert wrong_key.status_code == 401 and wrong_key.json()["error"]["type"] == "authentication_error"
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    assert wrong_method.status_code == 405
    assert mock.requests == [] and state["trajectory"] == []


async def test_chat_upstreams_get_no_keys_chat_completions_lacks(mock: MockModelServer) -> None:
    state, session = await open_rollout(mock)
    body = {
        "model": "m",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "run it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-A"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "no", "is_error": True}]},
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {}}}],
    }
    response = await post(session, "/messages", body)
    assert response.status_code == 200, response.text
    sent = mock.requests[0].body["messages"]
    assert all("is_error" not in m and "reasoning_signature" not in m for m in sent)
    assert sent[1]["reasoning_content"] == "plan"
    prompt = state["trajectory"][0]["prompt"]
    assert prompt[-1]["is_error"] is True and prompt[1]["reasoning_signature"] == "sig-A"
