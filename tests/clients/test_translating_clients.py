"""The translating upstream clients (Responses, Anthropic Messages, Completions) against the mock, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import v1 as vf
from v1.clients import resolve_client
from v1.testing import MockModelServer, Reply

CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "2", "reasoning_content": "old thought"},
    {"role": "user", "content": "and add 1?"},
    {"role": "assistant", "content": None, "reasoning_content": "chain thought", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def config(mock: MockModelServer, client_type: str, **kwargs: Any) -> vf.ClientConfig:
    return vf.ClientConfig(client_type=client_type, api_base_url=mock.url, max_retries=0, **kwargs)


@pytest.mark.parametrize("client_type", ["openai_responses", "anthropic_messages", "openai_chat_completions"])
@pytest.mark.parametrize(
    ("flags", "kept"),
    [
        ({}, []),
        ({"preserve_thinking_between_tool_calls": True}, ["chain thought"]),
        ({"preserve_all_thinking": True}, ["old thought", "chain thought"]),
    ],
    ids=["default", "between_tool_calls", "all"],
)
async def test_thinking_reaches_the_upstream_as_configured(
    mock: MockModelServer, client_type: str, flags: dict[str, bool], kept: list[str]
) -> None:
    client = await resolve_client(config(mock, client_type, **flags))
    await client.get_response(HISTORY, "m", {})
    (request,) = mock.requests
    assert [m.get("reasoning_content") for m in request.messages if m.get("reasoning_content")] == kept
    assert request.messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "3"}


@pytest.mark.parametrize("client_type", ["openai_responses", "anthropic_messages", "openai_chat_completions_token"])
async def test_reasoning_and_tool_calls_come_back(mock: MockModelServer, client_type: str) -> None:
    mock.script(Reply.tool("add", {"a": 1}, content="Adding.", reasoning_content="one more"))
    client = await resolve_client(config(mock, client_type))
    response = await client.get_response(HISTORY[:2], "m", {}, tools=[vf.Tool(name="add")])
    assert response.message.content == "Adding."
    assert response.message.reasoning_content == "one more"
    assert response.message.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in response.message.tool_calls or []] == [("add", '{"a": 1}')]
    assert response.usage is not None and response.usage.completion_tokens > 0
    assert [t["function"]["name"] for t in mock.requests[0].tools] == ["add"]


@pytest.mark.parametrize(
    "client_type", ["openai_responses", "anthropic_messages", "openai_completions", "openai_chat_completions_token"]
)
async def test_headers_from_state_for_sticky_routing(mock: MockModelServer, client_type: str) -> None:
    client = await resolve_client(
        config(mock, client_type, extra_headers={"X-Team": "evals"}, extra_headers_from_state={"X-Session-ID": "example_id"})
    )
    state = vf.State.for_task({"prompt": "hi", "example_id": 7})
    prompt: Any = "hi" if client_type == "openai_completions" else [{"role": "user", "content": "hi"}]
    await client.get_response(prompt, "m", {}, state=state)
    headers = {key.lower(): value for key, value in mock.requests[0].headers.items()}
    assert headers["x-session-id"] == str(state["example_id"])
    assert headers["x-team"] == "evals"


@pytest.mark.parametrize("client_type", ["openai_responses", "anthropic_messages", "openai_completions"])
async def test_errors_overlong_auth_and_model(mock: MockModelServer, client_type: str) -> None:
    client = await resolve_client(config(mock, client_type))
    prompt: Any = "hi" if client_type == "openai_completions" else [{"role": "user", "content": "hi"}]
    mock.script(Reply.fail(400, "prompt is too long: 300000 tokens > 200000 maximum"))
    with pytest.raises(vf.OverlongPromptError):
        await client.get_response(prompt, "m", {})
    mock.script(Reply.fail(401, "invalid x-api-key"))
    with pytest.raises(Exception) as caught:
        await client.get_response(prompt, "m", {})
    assert not isinstance(caught.value, vf.Error)
    assert getattr(caught.value, "status_code", None) == 401
    mock.script(Reply.fail(500, "boom"))
    with pytest.raises(vf.ModelError, match="boom"):
        await client.get_response(prompt, "m", {})


async def test_retries_then_model_error(mock: MockModelServer) -> None:
    mock.script(Reply.fail(503, "busy"), "fine")
    client = await resolve_client(config(mock, "anthropic_messages").model_copy(update={"max_retries": 1}))
    response = await client.get_response([{"role": "user", "content": "hi"}], "m", {})
    assert response.message.content == "fine"
    assert len(mock.requests) == 2


async def test_an_asyncanthropic_object_is_wrapped(mock: MockModelServer) -> None:
    sdk = anthropic.AsyncAnthropic(base_url=mock.url.removesuffix("/v1"), api_key="k", max_retries=0)
    client = await resolve_client(sdk)
    assert isinstance(client, vf.AnthropicMessagesClient)
    assert (await client.get_response([{"role": "user", "content": "hey"}], "m", {})).message.content == "hey"
    await sdk.close()
