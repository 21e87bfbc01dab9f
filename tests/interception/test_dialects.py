"""Each endpoint dialect's bad input, error shapes, retry dedupe, `previous_response_id` and token capture, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic import BaseModel

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import resolve_client
from v1.interception import EndpointServer, RolloutSession, get_endpoint, upstream
from v1.registry import DIALECTS
from v1.testing import MockModelServer, Reply, mock_token_ids
from v1.types import Response, ResponseMessage, ResponseTokens, ToolCall, Usage

USER = [{"role": "user", "content": "hello"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


async def open_rollout(
    mock: MockModelServer, client_type: str = "openai_chat_completions", **runtime: Any
) -> tuple[EndpointServer, vf.State, RolloutSession]:
    endpoint = await get_endpoint()
    state = vf.State.for_task({"prompt": "hi"})
    upstream(state).client = await resolve_client(vf.ClientConfig(client_type=client_type, api_base_url=mock.url, max_retries=0))
    state.runtime.model = "m"
    upstream(state).sampling_args = dict(runtime.get("sampling_args") or {})
    return endpoint, state, endpoint.open(state)


# -- malformed requests: 400 in each dialect's own error shape -------------------------------------

OPENAI_BAD = [
    (
        "/chat/completions",
        {"messages": [*USER, {"role": "tool", "tool_call_id": "nope", "content": "3"}]},
        "messages[1]",
        "unknown tool call id 'nope'",
    ),
    ("/completions", {"prompt": "x"}, "model", "'model' is required"),
    ("/completions", {"model": "m"}, "prompt", "'prompt' is required"),
    ("/completions", {"model": "m", "prompt": 5}, "prompt", "must be a string"),
    ("/completions", {"model": "m", "prompt": [1, 2, 3]}, "prompt", "token-id prompts"),
    ("/completions", {"model": "m", "prompt": "x", "n": 2}, "n", "n > 1"),
    ("/completions", {"model": "m", "prompt": "x", "echo": True}, "echo", "'echo' is not supported"),
    ("/completions", {"model": "m", "prompt": "x", "logprobs": "many"}, "logprobs", "non-negative integer"),
    ("/responses", {"input": "x"}, "model", "'model' is required"),
    ("/responses", {"model": "m"}, "input", "'input' is required"),
    ("/responses", {"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role", "'robot'"),
    ("/responses", {"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content", "string or a list"),
    (
        "/responses",
        {"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        "input[0].content[0]",
        "'input_audio'",
    ),
    (
        "/responses",
        {"model": "m", "input": [{"type": "function_call_output", "call_id": "nope", "output": "3"}]},
        "input[0]",
        "unknown tool call id 'nope'",
    ),
    (
        "/responses",
        {"model": "m", "input": "x", "previous_response_id": "resp_nope"},
        "previous_response_id",
        "not a response of this rollout",
    ),
    ("/responses", {"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "ns"}]}, "tools[0]", "namespace tool"),
    ("/chat/completions", {"model": "m", "messages": USER, "tools": "add"}, "tools", "must be a list"),
    ("/chat/completions", {"model": "m", "messages": USER, "tools": [5]}, "tools[0]", "{'type': 'function'"),
    ("/chat/completions", {"model": "m", "messages": USER, "tools": [{"type": "function"}]}, "tools[0]", "{'type': 'function'"),
    (
        "/chat/completions",
        {"model": "m", "messages": USER, "tools": [{"type": "web", "function": {"name": "add"}}]},
        "tools[0]",
        "{'type': 'function'",
    ),
    (
        "/chat/completions",
        {"model": "m", "messages": USER, "tools": [{"type": "function", "function": {"name": ""}}]},
        "tools[0].function.name",
        "non-empty string",
    ),
    (
        "/chat/completions",
        {"model": "m", "messages": USER, "tools": [{"function": {"name": "add", "parameters": [1]}}]},
        "tools[0].function.parameters",
        "JSON schema object",
    ),
    (
        "/responses",
        {"model": "m", "input": [{"type": "item_reference", "id": "x"}]},
        "input[0]",
        "'item_reference' is not supported",
    ),
]


@pytest.mark.parametrize(("route", "body", "param", "fragment"), OPENAI_BAD)
async def test_openai_dialects_reject_malformed_requests(
    mock: MockModelServer, route: str, body: Any, param: str, fragment: str
) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(
            f"{session.base_url}{route}", headers={"Authorization": f"Bearer {session.api_key}"}, json=body
        )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert fragment in error["message"]
    assert mock.requests == []
    assert state["trajectory"] == []


TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}]}
MESSAGES_BAD = [
    ({"max_tokens": 5, "messages": USER}, "model: field required"),
    ({"model": "m", "max_tokens": 5}, "messages: field required"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "must be 'user', 'assistant' or 'system'"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 5}]}, "string or a list of content blocks"),
    (
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document"}]}]},
        "'document' is not supported",
    ),
    (
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                *USER,
                TOOL_USE,
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "3"}]},
            ],
        },
        "unknown tool call id 'toolu_2'",
    ),
    ({"model": "m", "max_tokens": 5, "messages": USER, "tools": [{"name": "bash"}]}, "input_schema must be"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "tool_choice": {"type": "maybe"}}, "tool_choice must be"),
]


@pytest.mark.parametrize(("body", "fragment"), MESSAGES_BAD)
async def test_messages_dialect_rejects_malformed_requests_in_anthropic_shape(
    mock: MockModelServer, body: Any, fragment: str
) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/messages", headers={"x-api-key": session.api_key}, json=body)
    assert response.status_code == 400, response.text
    payload = response.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert fragment in payload["error"]["message"]
    assert mock.requests == []
    assert state["trajectory"] == []


async def test_anthropic_sdk_sees_its_own_error_types(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock)
    wrong = anthropic.AsyncAnthropic(base_url=session.base_url.removesuffix("/v1"), api_key="v1-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        await wrong.messages.create(model="m", max_tokens=5, messages=USER)  # type: ignore[arg-type]
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    await wrong.close()
    client = state.get_client("messages")
    with pytest.raises(anthropic.BadRequestError, match="unknown tool call id"):
        await client.messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "1"}]}],
        )


async def test_untranslatable_feature_is_a_400_naming_it(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock, "anthropic_messages")
    client = state.get_client("chat_completions")
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=USER, logprobs=True)  # type: ignore[arg-type]
    assert caught.value.code == "unsupported_feature"
    assert "logprobs cannot be requested from an anthropic_messages upstream" in caught.value.message
    assert state["error"] is None and state["trajectory"] == [] and session.turns_started == 0
    assert mock.requests == []


# -- retries, previous_response_id --------------------------------------------------------------------


async def test_sdk_retry_of_an_answered_request_gets_the_same_answer_and_no_new_step(mock: MockModelServer) -> None:
    mock.script("first", "second")
    _, state, session = await open_rollout(mock)
    headers = {"Authorization": f"Bearer {session.api_key}"}
    body = {"model": "m", "messages": USER}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        first = await http.post(
            f"{session.base_url}/chat/completions", headers={**headers, "x-stainless-retry-count": "0"}, json=body
        )
        retried = await http.post(
            f"{session.base_url}/chat/completions", headers={**headers, "x-stainless-retry-count": "1"}, json=body
        )
        again = await http.post(f"{session.base_url}/chat/completions", headers=headers, json=body)  # not a retry: a new turn
    assert retried.json() == first.json()
    assert first.json()["choices"][0]["message"]["content"] == "first"
    assert again.json()["choices"][0]["message"]["content"] == "second"
    assert len(state["trajectory"]) == 2
    assert len(mock.requests) == 2


async def test_tools_read_once_still_reach_the_upstream_exactly_as_each_call_sent_them(mock: MockModelServer) -> None:
    """Tool lists read before are reused by their exact text: 1, 1.0 and true, equal in Python, stay apart."""
    _, _, session = await open_rollout(mock)
    headers = {"Authorization": f"Bearer {session.api_key}"}

    def tools(minimum: Any, description: str = "Add.") -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"a": {"type": "number", "minimum": minimum}}}
        return [{"type": "function", "function": {"name": "add", "description": description, "parameters": schema}}]

    sent = [tools(1), tools(1.0), tools(True), tools(1), tools(1, "Add two."), tools(None), tools(None)]
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        for listed in sent:
            body = {"model": "m", "messages": USER, "tools": listed}
            answer = await http.post(f"{session.base_url}/chat/completions", headers=headers, json=body)
            assert answer.status_code == 200, answer.text
    seen = [request.body["tools"] for request in mock.requests]
    assert seen == sent
    minimums = [listed[0]["function"]["parameters"]["properties"]["a"]["minimum"] for listed in seen]
    assert [type(minimum) for minimum in minimums] == [int, float, bool, int, int, type(None), type(None)]
    assert [listed[0]["function"]["description"] for listed in seen][3:5] == ["Add.", "Add two."]


def test_tool_lists_kept_for_reuse_are_bounded_in_count_and_size() -> None:
    from v1.interception import _dialect
    from v1.interception._chat_completions import parse_tools

    def listed(name: str, description: str = "") -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": name, "description": description}}]

    for index in range(3 * _dialect._PARSED_TOOLS_MAX):  # a program sending ever new lists
        assert [tool.name for tool in parse_tools(listed(f"t{index}")) or []] == [f"t{index}"]
        assert len(_dialect._PARSED_TOOLS) <= _dialect._PARSED_TOOLS_MAX
    large = listed("big", "x" * _dialect._PARSED_TOOLS_MAX_TEXT)
    parse_tools(large)
    assert all(b"big" not in key for _, key in _dialect._PARSED_TOOLS)
    first, again = parse_tools(listed("same")), parse_tools(listed("same"))
    assert first == again and first is not again  # a list of its own each time


async def test_retry_while_the_first_call_is_in_flight_shares_its_answer(mock: MockModelServer) -> None:
    mock.script(Reply.text("slow", delay=0.3))
    _, state, session = await open_rollout(mock)
    key = {"Authorization": f"Bearer {session.api_key}", "Idempotency-Key": "abc"}
    body = {"model": "m", "input": "hi"}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        first, second = await asyncio.gather(
            http.post(f"{session.base_url}/responses", headers=key, json=body),
            http.post(f"{session.base_url}/responses", headers=key, json=body),
        )
    assert first.json() == second.json()
    assert first.json()["output"][0]["content"][0]["text"] == "slow"
    assert len(mock.requests) == 1
    assert len(state["trajectory"]) == 1


async def test_previous_response_id_continues_the_conversation(mock: MockModelServer) -> None:
    mock.script("one", "two")
    _, state, _session = await open_rollout(mock)
    client = state.get_client("responses")
    first = await client.responses.create(model="m", input="hi", instructions="be brief")
    second = await client.responses.create(model="m", input="more", previous_response_id=first.id)
    assert second.output_text == "two"
    assert state["trajectory"][1]["prompt"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "more"},
    ]
    assert mock.requests[1].messages == state["trajectory"][1]["prompt"]


async def test_multimodal_tool_results_are_not_stringified(mock: MockModelServer) -> None:
    _, state, _session = await open_rollout(mock, "anthropic_messages")
    client = state.get_client("messages")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    messages: list[Any] = [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "here"}, image]}],
        },
    ]
    await client.messages.create(model="m", max_tokens=5, messages=messages)
    tool_message = state["trajectory"][0]["prompt"][-1]
    assert tool_message["content"] == [
        {"type": "text", "text": "here"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    (upstream,) = mock.requests  # and it reached the Anthropic upstream as an image block again
    assert upstream.body["messages"][-1]["content"][0]["content"][1] == image


# -- token capture --------------------------------------------------------------------------------------


@pytest.mark.parametrize("client_type", ["openai_chat_completions_token", "openai_completions", "openai_chat_completions"])
async def test_token_ids_and_logprobs_are_captured_over_two_turns(mock: MockModelServer, client_type: str) -> None:
    mock.script(
        Reply.text("four", completion_ids=[11, 12, 13], logprobs=[-0.5, -0.25, -0.125]),
        Reply.text("five", completion_ids=[21, 22], logprobs=[-1.0, -2.0]),
    )
    sampling_args = {} if client_type == "openai_chat_completions_token" else {"logprobs": True, "return_token_ids": True}
    _, state, _session = await open_rollout(mock, client_type, sampling_args=sampling_args)
    client = state.get_client("completions" if client_type == "openai_completions" else "chat_completions")
    if client_type == "openai_completions":
        prompts: list[Any] = ["2+2=", "2+2=four. 2+3="]
        for prompt in prompts:
            await client.completions.create(model="m", prompt=prompt)
        texts = [f"user: {prompt}" for prompt in prompts]
    else:
        prompts = [USER, [*USER, {"role": "assistant", "content": "four"}, {"role": "user", "content": "and 2+3?"}]]
        for messages in prompts:
            await client.chat.completions.create(model="m", messages=messages)
        texts = ["user: hello", "user: hello\nassistant: four\nuser: and 2+3?"]
    expected = [([11, 12, 13], [-0.5, -0.25, -0.125]), ([21, 22], [-1.0, -2.0])]
    for step, text, (ids, logprobs) in zip(state["trajectory"], texts, expected):
        tokens = step["tokens"]
        assert tokens is not None
        assert tokens["prompt_ids"] == mock_token_ids(text)
        assert tokens["prompt_mask"] == [0] * len(tokens["prompt_ids"])
        assert tokens["completion_ids"] == ids
        assert tokens["completion_mask"] == [1] * len(ids)
        assert tokens["completion_logprobs"] == logprobs
        assert tokens["overlong_prompt"] is False and tokens["is_truncated"] is False
    assert all(request.body.get("return_token_ids") for request in mock.requests)


async def test_token_client_uses_the_token_route(mock: MockModelServer) -> None:
    _, state, _session = await open_rollout(mock, "openai_chat_completions_token")
    client = upstream(state).client
    assert client is not None
    response = await client.get_response(USER, "m", {})
    assert mock.requests[0].path == "/v1/chat/completions/tokens"
    assert mock.requests[0].body["logprobs"] is True
    assert response.message.tokens is not None


# -- real streaming: relayed as the upstream generates, recorded before the terminal event --------------

STREAMS = {
    "/chat/completions": ({"messages": USER}, "[DONE]"),
    "/completions": ({"prompt": "hello"}, "[DONE]"),
    "/responses": ({"input": "hello"}, "response.completed"),
    "/messages": ({"max_tokens": 50, "messages": USER}, "message_stop"),
}


async def read_stream(session: RolloutSession, state: vf.State, route: str, body: dict[str, Any]) -> list[tuple[str, int]]:
    """Every SSE line with the number of trajectory steps recorded when the program read it."""
    headers = {"Authorization": f"Bearer {session.api_key}"}
    seen: list[tuple[str, int]] = []
    async with (
        httpx.AsyncClient(timeout=HANG_S) as http,
        http.stream(
            "POST", f"{session.base_url}{route}", headers=headers, json={"model": "m", **body, "stream": True}
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line:
                seen.append((line, len(state["trajectory"])))
    return seen


@pytest.mark.parametrize("client_type", ["openai_chat_completions", "openai_responses", "anthropic_messages"])
@pytest.mark.parametrize("route", list(STREAMS))
async def test_every_dialect_streams_incrementally_and_records_before_the_end(
    mock: MockModelServer, route: str, client_type: str
) -> None:
    mock.script(Reply.text("one two three four five", stream_delay=0.05))
    _, state, session = await open_rollout(mock, client_type)
    body, terminal = STREAMS[route]
    seen = await read_stream(session, state, route, body)
    words = [steps for line, steps in seen if '"one ' in line or '"two ' in line]
    assert words and words[0] == 0  # relayed while the upstream was still generating
    end = next(i for i, (line, _) in enumerate(seen) if terminal in line)
    assert all(steps == 1 for _, steps in seen[end:])
    assert state["trajectory"][0]["completion"][0]["content"] == "one two three four five"
    assert mock.requests[0].body["stream"] is True


@pytest.mark.parametrize(("route", "keepalive"), [("/chat/completions", ": keepalive"), ("/messages", "event: ping")])
async def test_keepalives_while_the_upstream_is_silent(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch, route: str, keepalive: str
) -> None:
    from v1.interception import _server as server

    monkeypatch.setattr(server, "KEEPALIVE_S", 0.05)
    mock.script(Reply.text("late answer", delay=0.5))
    _, state, session = await open_rollout(mock)
    seen = await read_stream(session, state, route, STREAMS[route][0])
    lines = [line for line, _ in seen]
    assert keepalive in lines
    assert state["trajectory"][0]["completion"][0]["content"] == "late answer"


def _relaying_streams() -> list[asyncio.Task[Any]]:
    """The tasks relaying a streamed answer right now: the endpoint's `_answer_stream` is in their chain of awaits."""

    def awaits(task: asyncio.Task[Any]) -> Iterator[str]:
        awaited: Any = task.get_coro()
        while awaited is not None and hasattr(awaited, "cr_code"):
            yield awaited.cr_code.co_name
            awaited = awaited.cr_await

    return [task for task in asyncio.all_tasks() if "_answer_stream" in awaits(task)]


@pytest.mark.parametrize("carrier", ["in_process", "http"])
async def test_a_program_that_leaves_while_the_upstream_is_silent_stops_the_call(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch, carrier: str
) -> None:
    from v1.interception import _server as server

    monkeypatch.setattr(server, "KEEPALIVE_S", 0.05)
    mock.script(Reply.hang(2 * HANG_S))  # longer than the wait below: only the endpoint can end the stream in time
    _, state, session = await open_rollout(mock)
    if carrier == "in_process":
        stream = await state.get_client().chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
        relaying = _relaying_streams()
        assert relaying  # the first keepalive opened the stream; the upstream still has not answered
        await stream.close()
    else:
        async with (
            httpx.AsyncClient(timeout=HANG_S) as http,
            http.stream(
                "POST",
                f"{session.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {session.api_key}"},
                json={"model": "m", "messages": USER, "stream": True},
            ) as response,
        ):
            async for line in response.aiter_lines():  # the opening chunk, then the keepalive that opened the stream
                if line == ": keepalive":
                    break
            relaying = _relaying_streams()
            assert relaying
        # leaving the block closed the connection
    # the next keepalive finds the program gone and stops relaying (when the upstream answers, otherwise)
    _, still_relaying = await asyncio.wait(relaying, timeout=HANG_S)
    assert not still_relaying and not _relaying_streams()
    assert state["trajectory"] == []
    assert not state.get("error")


async def test_streamed_tokens_are_captured(mock: MockModelServer) -> None:
    mock.script(Reply.text("four", completion_ids=[11, 12, 13], logprobs=[-0.5, -0.25, -0.125]))
    _, state, _session = await open_rollout(mock, sampling_args={"logprobs": True, "return_token_ids": True})
    client = state.get_client()
    chunks = await client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
    assert "".join([chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices]) == "four"
    tokens = state["trajectory"][0]["tokens"]
    assert tokens["prompt_ids"] == mock_token_ids("user: hello")
    assert tokens["completion_ids"] == [11, 12, 13]
    assert tokens["completion_logprobs"] == [-0.5, -0.25, -0.125]
    assert tokens["completion_mask"] == [1, 1, 1]


# -- sampling args: the harness wins, per dialect field names; limits ---------------------------------

SAMPLING_REQUESTS = {
    "/chat/completions": {"messages": USER, "temperature": 0.9, "top_p": 0.5, "max_tokens": 100},
    "/responses": {"input": "hello", "temperature": 0.9, "top_p": 0.5, "max_output_tokens": 100},
    "/messages": {"messages": USER, "temperature": 0.9, "top_p": 0.5, "max_tokens": 100},
}
UPSTREAM_MAX_TOKENS = {
    "openai_chat_completions": "max_tokens",
    "openai_responses": "max_output_tokens",
    "anthropic_messages": "max_tokens",
}


@pytest.mark.parametrize("client_type", list(UPSTREAM_MAX_TOKENS))
@pytest.mark.parametrize("route", list(SAMPLING_REQUESTS))
async def test_harness_sampling_args_win_in_every_dialect(mock: MockModelServer, route: str, client_type: str) -> None:
    _, _state, session = await open_rollout(mock, client_type, sampling_args={"temperature": 0.1, "max_tokens": 7})
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(
            f"{session.base_url}{route}",
            headers={"x-api-key": session.api_key},
            json={"model": "m", **SAMPLING_REQUESTS[route]},
        )
    assert response.status_code == 200, response.text
    (upstream,) = mock.requests
    assert upstream.body["temperature"] == 0.1  # the harness's value
    assert upstream.body["top_p"] == 0.5  # the program's, where the harness sets nothing
    assert upstream.body[UPSTREAM_MAX_TOKENS[client_type]] == 7


async def test_max_total_completion_tokens_caps_and_then_stops(mock: MockModelServer) -> None:
    mock.script("a b c", "d e f", "never")
    _, state, _session = await open_rollout(mock, sampling_args={"max_total_completion_tokens": 5})
    client = state.get_client()
    await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert caught.value.code == "max_total_completion_tokens_reached"
    assert [r.body["max_tokens"] for r in mock.requests] == [5, 2]
    assert all("max_total_completion_tokens" not in r.body for r in mock.requests)
    assert state["stop_condition"] == "max_total_completion_tokens_reached"
    assert len(state["trajectory"]) == 2


async def test_max_seq_len_stops_a_rollout_whose_context_is_full(mock: MockModelServer) -> None:
    mock.script("a b c d e f g h", "never")
    _, state, _session = await open_rollout(mock, sampling_args={"max_seq_len": 10})
    client = state.get_client()
    await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert caught.value.code == "context_length_exceeded"
    assert "fills max_seq_len (10)" in caught.value.message
    assert state["stop_condition"] == "prompt_too_long"
    assert state["is_truncated"] is True
    assert len(mock.requests) == 1 and "max_seq_len" not in mock.requests[0].body


async def test_a_program_leaving_mid_stream_is_not_an_error(mock: MockModelServer) -> None:
    mock.script(Reply.text("one two three four five six", stream_delay=0.1), "next")
    _, state, session = await open_rollout(mock)
    headers = {"Authorization": f"Bearer {session.api_key}"}
    async with (
        httpx.AsyncClient(timeout=HANG_S) as http,
        http.stream(
            "POST", f"{session.base_url}/responses", headers=headers, json={"model": "m", "input": "x", "stream": True}
        ) as response,
    ):
        async for line in response.aiter_lines():
            if "output_text.delta" in line:
                relaying = _relaying_streams()
                break  # leave while the upstream is still generating
    _, still_relaying = await asyncio.wait(relaying, timeout=HANG_S)  # the endpoint noticed and ended the stream
    assert relaying and not still_relaying
    assert state["error"] is None
    answer = await state.get_client("responses").responses.create(model="m", input="again")
    assert answer.output_text == "next"
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["next"]


async def test_a_retried_stream_replays_the_answer_without_a_new_step(mock: MockModelServer) -> None:
    mock.script("streamed once", "never")
    _, state, session = await open_rollout(mock)
    headers = {"x-api-key": session.api_key}
    body = {"model": "m", "max_tokens": 9, "messages": USER, "stream": True}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        first = await http.post(f"{session.base_url}/messages", headers=headers, json=body)
        again = await http.post(f"{session.base_url}/messages", headers={**headers, "x-stainless-retry-count": "1"}, json=body)
    texts = [
        "".join(json.loads(line[6:])["delta"].get("text", "") for line in r.text.splitlines() if "text_delta" in line)
        for r in (first, again)
    ]
    assert texts == ["streamed once", "streamed once"]
    assert len(state["trajectory"]) == 1
    assert len(mock.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_identical_concurrent_calls_that_are_not_retries_are_separate_turns(mock: MockModelServer, stream: bool) -> None:
    mock.script(Reply.text("a", delay=0.2), Reply.text("b", delay=0.1))
    _, state, session = await open_rollout(mock)
    headers = {"Authorization": f"Bearer {session.api_key}"}
    body = {"model": "m", "messages": USER, "stream": stream}
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        responses = await asyncio.gather(
            *(http.post(f"{session.base_url}/chat/completions", headers=headers, json=body) for _ in range(2))
        )
    assert [r.status_code for r in responses] == [200, 200]
    assert sorted(step["completion"][0]["content"] for step in state["trajectory"]) == ["a", "b"]
    assert state["error"] is None


_MINIMAL_REQUESTS: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "messages": ({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, {}),
    "gemini": ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, {"model": "m"}),
    "chat_completions": ({"messages": [{"role": "user", "content": "hi"}]}, {}),
    "completions": ({"model": "m", "prompt": "hi"}, {}),
    "responses": ({"model": "m", "input": "hi"}, {}),
}


def _containers(value: Any, seen: set[int]) -> set[int]:
    """The ids of every list and dict reachable from `value`, pydantic models walked by their fields."""
    if isinstance(value, BaseModel):
        for field_value in value.__dict__.values():
            _containers(field_value, seen)
    elif isinstance(value, (list, dict)) and id(value) not in seen:
        seen.add(id(value))
        for item in value.values() if isinstance(value, dict) else value:
            _containers(item, seen)
    return seen


@pytest.mark.parametrize("name", sorted(_MINIMAL_REQUESTS))
def test_every_dialects_answer_is_built_for_it_alone(name: str) -> None:
    """In process, v1's own calls get the rendered value itself (not its text), and the step keeps the
    `Response`'s lists: a render must share no list or dict with the `Response` it renders."""
    tokens = ResponseTokens(
        prompt_ids=[1, 2], prompt_mask=[0, 0], completion_ids=[3, 4], completion_mask=[1, 1], completion_logprobs=[-0.5, -0.25]
    )
    calls = [ToolCall(id="call_1", name="add", arguments='{"a": 1}')] if name != "completions" else None
    response = Response(
        id="r",
        created=1,
        model="m",
        usage=Usage(prompt_tokens=2, completion_tokens=2, total_tokens=4),
        message=ResponseMessage(content="hi", finish_reason="tool_calls" if calls else "stop", tokens=tokens, tool_calls=calls),
    )
    dialect = DIALECTS.get(name)
    body, fields = _MINIMAL_REQUESTS[name]
    parsed = dialect.parse_request(body, **fields)
    rendered = dialect.render(response, "m", parsed)
    assert not _containers(rendered, set()) & _containers(response, set())


def _nulls(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _nulls(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _nulls(item, f"{path}[{index}]")]
    return [path] if value is None else []


@pytest.mark.parametrize("content", ["hi", None])
@pytest.mark.parametrize("reasoning", ["think", None])
@pytest.mark.parametrize("calls", [None, [], [ToolCall(id="call_1", name="add", arguments="{}")]])
def test_the_chat_render_writes_its_message_as_the_sdk_dumps_it_without_nulls(
    content: str | None, reasoning: str | None, calls: list[ToolCall] | None
) -> None:
    """The base loop appends the rendered message as it is: what `openai`'s `ChatCompletionMessage` gives with
    `model_dump(exclude_none=True, exclude_unset=True)`, `content` always there, and no other null at any depth."""
    message = ResponseMessage(content=content, reasoning_content=reasoning, finish_reason=None, tool_calls=calls)
    response = Response(id="r", created=1, model="m", message=message)
    dialect = DIALECTS.get("chat_completions")
    parsed = dialect.parse_request(_MINIMAL_REQUESTS["chat_completions"][0])
    rendered = dialect.render(response, "m", parsed)["choices"][0]["message"]
    assert _nulls(rendered) == ([".content"] if content is None else [])
    sdk = openai.types.chat.ChatCompletionMessage.model_validate(rendered)
    assert rendered == sdk.model_dump(exclude_none=True, exclude_unset=True) | {"content": content}


def test_every_dialect_has_a_minimal_request_above() -> None:
    assert sorted(_MINIMAL_REQUESTS) == sorted(dialect.name for dialect in DIALECTS.values())
