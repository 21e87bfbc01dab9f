"""The interception endpoint over real HTTP: auth, validation, limits, rendering, recording, lifetime.

Every test talks to a real `EndpointServer` (the running loop's, or one started
here) with httpx or the official openai SDK; upstream is a real `MockModelServer`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import openai
import pytest
from aiohttp import web

import v1 as vf
from tests.tools.patience import HANG_S
from v1._util.loop_scope import close_loop_scope
from v1.clients import resolve_client
from v1.interception import EndpointServer, RolloutSession, get_endpoint, upstream
from v1.interception._server import MAX_BODY_ENV
from v1.testing import MockModelServer, Reply, mock_token_ids

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


async def rollout_state(mock: MockModelServer, *, model: str = "m", sampling_args: dict[str, Any] | None = None) -> vf.State:
    state = vf.State.for_task({"prompt": "hi"})
    upstream(state).client = await resolve_client(vf.ClientConfig(api_base_url=mock.url, max_retries=0))
    state.runtime.model = model
    upstream(state).sampling_args = dict(sampling_args or {})
    return state


async def open_rollout(mock: MockModelServer, **kwargs: Any) -> tuple[EndpointServer, vf.State, RolloutSession]:
    endpoint = await get_endpoint()
    state = await rollout_state(mock, **kwargs)
    return endpoint, state, endpoint.open(state)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_openai_error(response: httpx.Response, status: int, *, type_: str, code: str | None, fragment: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code", "param"}
    assert error["type"] == type_
    assert error["code"] == code
    assert fragment in error["message"]
    return error


def sdk(session: Any, **kwargs: Any) -> openai.AsyncOpenAI:
    """A program's SDK client; its connect waits `HANG_S` (the SDK's 5 s would make a loaded machine red)."""
    kwargs.setdefault("timeout", httpx.Timeout(HANG_S))
    return openai.AsyncOpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0, **kwargs)


def port_of(url: str) -> int:
    port = urlparse(url).port
    assert port is not None
    return port


# -- authentication and routing ----------------------------------------------------------------


async def test_get_endpoint_after_its_loop_scope_closed_starts_a_new_one() -> None:
    """The endpoint found without the loop scope is the one the scope holds; once the scope closed it, a new one."""
    first = await get_endpoint()
    assert await get_endpoint() is first and first.serving
    await close_loop_scope()
    assert not first.serving
    second = await get_endpoint()
    assert second is not first and second.serving
    assert await get_endpoint() is second


async def test_base_url_names_the_rollout_and_key_is_secret(mock: MockModelServer) -> None:
    endpoint, state, session = await open_rollout(mock)
    assert session.base_url == f"http://127.0.0.1:{endpoint.port}/r/{state['trajectory_id']}/v1"
    assert upstream(state).session is session
    config = state.get_endpoint_config()
    assert config == {
        "api": "chat_completions",
        "base_url": session.base_url,
        "api_base": session.base_url,
        "api_key": session.api_key,
        "model": "m",
    }
    assert len(session.api_key) > 20


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Authorization": "Bearer wrong-key"}, id="wrong-bearer"),
        pytest.param({"x-api-key": "wrong-key"}, id="wrong-x-api-key"),
        pytest.param({}, id="missing"),
        pytest.param({"Authorization": "Basic abc"}, id="not-bearer"),
        pytest.param({"Authorization": "Bearer"}, id="bearer-without-token"),
    ],
)
async def test_wrong_or_missing_key_is_401(mock: MockModelServer, headers: dict[str, str]) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/chat/completions", headers=headers, json={"messages": USER})
        models = await http.get(f"{session.base_url}/models", headers=headers)
    assert_openai_error(response, 401, type_="authentication_error", code="invalid_api_key", fragment="API key")
    assert_openai_error(models, 401, type_="authentication_error", code="invalid_api_key", fragment="API key")
    assert mock.requests == []
    assert state["trajectory"] == []
    assert session.turns_started == 0


async def test_x_api_key_header_is_accepted(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(
            f"{session.base_url}/chat/completions", headers={"x-api-key": session.api_key}, json={"messages": USER}
        )
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    assert len(state["trajectory"]) == 1


async def test_another_rollouts_key_is_refused(mock: MockModelServer) -> None:
    endpoint = await get_endpoint()
    state_a, state_b = await rollout_state(mock), await rollout_state(mock)
    session_a, session_b = endpoint.open(state_a), endpoint.open(state_b)
    assert session_a.api_key != session_b.api_key
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        crossed = await http.post(
            f"{session_a.base_url}/chat/completions", headers=auth(session_b.api_key), json={"messages": USER}
        )
        own = await http.post(f"{session_b.base_url}/chat/completions", headers=auth(session_b.api_key), json={"messages": USER})
    assert_openai_error(crossed, 401, type_="authentication_error", code="invalid_api_key", fragment="invalid or missing API key")
    assert own.status_code == 200
    assert state_a["trajectory"] == []
    assert len(state_b["trajectory"]) == 1


@pytest.mark.parametrize(
    "pins",
    [
        pytest.param(["other-rollout"], id="another-rollout"),
        pytest.param(
            [
                "",
            ],
            id="empty",
        ),
        pytest.param(["OWN", "other-rollout"], id="own-and-another"),
        pytest.param(["OWN-x"], id="own-with-a-suffix"),
    ],
)
async def test_a_request_pinned_to_another_rollout_is_401_even_with_the_right_key(mock: MockModelServer, pins: list[str]) -> None:
    _, state, session = await open_rollout(mock)
    headers = [("Authorization", f"Bearer {session.api_key}")]
    headers += [("X-V1-Rollout", pin.replace("OWN", session.rollout_id)) for pin in pins]
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        pinned = await http.post(f"{session.base_url}/chat/completions", headers=headers, json={"messages": USER})
        own = await http.post(
            f"{session.base_url}/chat/completions",
            headers={**auth(session.api_key), "X-V1-Rollout": session.rollout_id},
            json={"messages": USER},
        )
    assert_openai_error(pinned, 401, type_="authentication_error", code="invalid_api_key", fragment="API key")
    assert own.status_code == 200, own.text
    assert len(state["trajectory"]) == 1 and len(mock.requests) == 1


async def test_openai_sdk_sees_authentication_error(mock: MockModelServer) -> None:
    _, _, session = await open_rollout(mock)
    client = openai.AsyncOpenAI(base_url=session.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    await client.close()


async def test_unknown_rollout_and_wrong_key_are_indistinguishable(mock: MockModelServer) -> None:
    endpoint, state, session = await open_rollout(mock)
    own = f"{endpoint.url}/r/{state['trajectory_id']}/v1"
    unknown = f"{endpoint.url}/r/no-such-rollout/v1"
    answers = []
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        for base, key in ((unknown, session.api_key), (own, "v1-wrong"), (unknown, "v1-wrong"), (own, None)):
            headers = auth(key) if key else {}
            answers.append(await http.post(f"{base}/chat/completions", headers=headers, json={"messages": USER}))
            answers.append(await http.get(f"{base}/models", headers=headers))
    for response in answers:
        assert_openai_error(response, 401, type_="authentication_error", code="invalid_api_key", fragment="invalid or missing")
    assert len({response.text for response in answers}) == 1, "the body must not tell an unknown rollout from a wrong key"
    assert mock.requests == []


@pytest.mark.parametrize(
    ("method", "suffix", "allowed"),
    [
        ("GET", "/r/{rollout}/v1/chat/completions", "POST"),
        ("PUT", "/r/{rollout}/v1/responses", "POST"),
        ("DELETE", "/r/{rollout}/v1/models", "GET"),
    ],
)
async def test_wrong_method_on_a_known_route_is_405(mock: MockModelServer, method: str, suffix: str, allowed: str) -> None:
    endpoint, state, session = await open_rollout(mock)
    path = suffix.format(rollout=state["trajectory_id"])
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.request(method, endpoint.url + path, headers=auth(session.api_key), json={"messages": USER})
    assert_openai_error(response, 405, type_="invalid_request_error", code="method_not_allowed", fragment=f"use {allowed}")
    assert response.headers["Allow"] == allowed
    assert mock.requests == []


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", "/"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/r/{rollout}/v1/embeddings"),
        ("POST", "/r/{rollout}/v1/responses/compact"),
    ],
)
async def test_unknown_route_is_404(mock: MockModelServer, method: str, suffix: str) -> None:
    endpoint, state, session = await open_rollout(mock)
    path = suffix.format(rollout=state["trajectory_id"])
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.request(method, endpoint.url + path, headers=auth(session.api_key), json={"messages": USER})
    assert_openai_error(response, 404, type_="not_found_error", code="unknown_route", fragment=f"no such route: {method} {path}")
    assert mock.requests == []


# -- request validation --------------------------------------------------------------------------

BAD_BODIES = [
    pytest.param({"model": "m"}, "messages", "'messages' is required", id="missing-messages"),
    pytest.param({"messages": []}, "messages", "non-empty list", id="empty-messages"),
    pytest.param({"messages": "hello"}, "messages", "non-empty list", id="messages-not-list"),
    pytest.param({"messages": ["hello"]}, "messages[0]", "must be an object", id="message-not-object"),
    pytest.param({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'robot'", id="bad-role"),
    pytest.param({"messages": [{"content": "x"}]}, "messages[0].role", "role must be one of", id="missing-role"),
    pytest.param({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "string or a list", id="content-int"),
    pytest.param(
        {"messages": [{"role": "user", "content": {"a": 1}}]}, "messages[0].content", "string or a list", id="content-dict"
    ),
    pytest.param({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]", "content part", id="content-part"),
    pytest.param(
        {"messages": [*USER, {"role": "tool", "content": "4"}]}, "messages[1].tool_call_id", "tool_call_id", id="tool-no-id"
    ),
    pytest.param(
        {"messages": [*USER, {"role": "user", "content": "x", "tool_calls": []}]},
        "messages[1].tool_calls",
        "assistant message",
        id="tool-calls-on-user",
    ),
    pytest.param(
        {"messages": [*USER, {"role": "assistant", "tool_calls": [{"function": {}}]}]},
        "messages[1].tool_calls[0]",
        "function.name",
        id="tool-call-no-name",
    ),
    pytest.param({"messages": USER, "n": 2}, "n", "n > 1 is not supported", id="n=2"),
    pytest.param({"messages": USER, "model": 3}, "model", "'model' must be a string", id="model-not-string"),
    pytest.param({"messages": USER, "tools": "add"}, "tools", "tools must be a list", id="tools-not-list"),
    pytest.param({"messages": USER, "tools": [{"type": "function"}]}, "tools[0]", "tools[0] must be", id="tool-no-function"),
    pytest.param(
        {"messages": USER, "tools": [{"type": "function", "function": {"name": ""}}]},
        "tools[0].function.name",
        "non-empty string",
        id="tool-empty-name",
    ),
    pytest.param(
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
        "tools[0].function.parameters",
        "JSON schema object",
        id="tool-parameters-list",
    ),
    pytest.param({"messages": USER, "functions": [{"name": "f"}]}, "functions", "use 'tools'", id="legacy-functions"),
    pytest.param({"messages": USER, "stream_options": "yes"}, "stream_options", "must be an object", id="stream-options"),
    pytest.param([USER], None, "must be a JSON object", id="body-not-object"),
]


@pytest.mark.parametrize(("body", "param", "fragment"), BAD_BODIES)
async def test_malformed_request_is_400_naming_the_param(
    mock: MockModelServer, body: Any, param: str | None, fragment: str
) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/chat/completions", headers=auth(session.api_key), json=body)
    error = assert_openai_error(response, 400, type_="invalid_request_error", code=None, fragment=fragment)
    assert error["param"] == param
    assert mock.requests == []
    assert state["trajectory"] == []
    assert session.turns_started == 0  # a rejected request does not use up a turn


async def test_invalid_json_is_400(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(
            f"{session.base_url}/chat/completions",
            headers={**auth(session.api_key), "Content-Type": "application/json"},
            content=b'{"messages": [',
        )
    error = assert_openai_error(response, 400, type_="invalid_request_error", code="invalid_json", fragment="not valid JSON")
    assert error["param"] is None
    assert mock.requests == []
    assert state["trajectory"] == []


async def test_openai_sdk_sees_bad_request_with_param(mock: MockModelServer) -> None:
    _, _, session = await open_rollout(mock)
    client = sdk(session)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=USER, n=2)  # type: ignore[arg-type]
    assert caught.value.status_code == 400
    assert caught.value.param == "n"
    assert "n > 1" in caught.value.message
    await client.close()


async def test_oversized_body_is_413() -> None:
    with MockModelServer() as mock:
        server = EndpointServer(max_body_bytes=1024)
        await server.start()
        try:
            state = await rollout_state(mock)
            session = server.open(state)
            assert session.base_url.startswith(f"http://127.0.0.1:{server.port}/r/")
            url = f"{session.base_url}/chat/completions"
            async with httpx.AsyncClient(timeout=HANG_S) as http:
                small = await http.post(
                    url, headers=auth(session.api_key), json={"messages": [{"role": "user", "content": "x" * 500}]}
                )
                big = await http.post(
                    url, headers=auth(session.api_key), json={"messages": [{"role": "user", "content": "x" * 2000}]}
                )

                async def chunked() -> Any:  # no Content-Length: the limit still applies while reading
                    yield json.dumps({"messages": [{"role": "user", "content": "y" * 4000}]}).encode()

                streamed = await http.post(url, headers=auth(session.api_key), content=chunked())
        finally:
            await server.close()
    assert small.status_code == 200, small.text
    assert_openai_error(big, 413, type_="invalid_request_error", code="request_too_large", fragment="larger than 1024 bytes")
    assert_openai_error(streamed, 413, type_="invalid_request_error", code="request_too_large", fragment=MAX_BODY_ENV)
    assert len(mock.requests) == 1
    assert len(state["trajectory"]) == 1


def test_body_limit_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's endpoint reads V1_ENDPOINT_MAX_BODY_BYTES when it is created."""
    monkeypatch.setenv(MAX_BODY_ENV, "2048")

    async def main(mock: MockModelServer) -> tuple[int, int, int]:
        endpoint, _, session = await open_rollout(mock)
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            url = f"{session.base_url}/chat/completions"
            ok = await http.post(url, headers=auth(session.api_key), json={"messages": [{"role": "user", "content": "a" * 1000}]})
            big = await http.post(
                url, headers=auth(session.api_key), json={"messages": [{"role": "user", "content": "a" * 3000}]}
            )
        return endpoint.max_body_bytes, ok.status_code, big.status_code

    with MockModelServer() as mock:
        assert asyncio.run(main(mock)) == (2048, 200, 413)


# -- models and completions ----------------------------------------------------------------------


async def test_models_lists_the_rollouts_model(mock: MockModelServer) -> None:
    _, _, session = await open_rollout(mock, model="my-policy")
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.get(f"{session.base_url}/models", headers=auth(session.api_key))
    assert response.status_code == 200
    assert response.json()["object"] == "list"
    assert [entry["id"] for entry in response.json()["data"]] == ["my-policy"]
    client = sdk(session)
    page = await client.models.list()
    assert [model.id for model in page.data] == ["my-policy"]
    await client.close()


async def test_rollout_model_is_used_whatever_the_request_names(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock, model="policy-7b")
    client = sdk(session)
    completion = await client.chat.completions.create(model="gpt-something-else", messages=USER)  # type: ignore[arg-type]
    assert completion.model == "policy-7b"
    assert mock.requests[0].body["model"] == "policy-7b"
    assert state["trajectory"][0]["prompt"] == USER
    await client.close()


TOOL_SPEC = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


async def test_streaming_and_non_streaming_agree(mock: MockModelServer) -> None:
    reply = Reply.tool("add", {"a": 1, "b": 2}, content="Let me add  those.").and_tool("add", {"a": 3, "b": 4})
    mock.script(reply, reply)
    _, state, session = await open_rollout(mock)
    client = sdk(session)
    plain = await client.chat.completions.create(model="m", messages=USER, tools=TOOL_SPEC)  # type: ignore[arg-type]
    stream = await client.chat.completions.create(
        model="m",
        messages=USER,  # type: ignore[arg-type]
        tools=TOOL_SPEC,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    await client.close()

    message = plain.choices[0].message
    assert message.content == "Let me add  those."
    assert plain.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == [
        (reply.tool_calls[0]["id"], "add", {"a": 1, "b": 2}),
        (reply.tool_calls[1]["id"], "add", {"a": 3, "b": 4}),
    ]

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                if delta.function is not None:
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert content == message.content
    assert [calls[i] for i in sorted(calls)] == [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []
    ]
    assert finish == ["tool_calls"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.model == "m" for c in chunks)

    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1].choices == []
    assert plain.usage is not None
    assert usage_chunks[0].usage.model_dump() == plain.usage.model_dump()  # type: ignore[union-attr]
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens > 0

    steps = state["trajectory"]
    assert len(steps) == 2
    assert steps[0]["completion"] == steps[1]["completion"]
    assert steps[1]["completion"][0]["content"] == "Let me add  those."
    assert [call["function"]["name"] for call in steps[1]["completion"][0]["tool_calls"]] == ["add", "add"]
    # the tools the program sent went upstream
    assert mock.requests[1].body["tools"][0]["function"]["name"] == "add"


async def test_stream_without_include_usage_has_no_usage_chunk(mock: MockModelServer) -> None:
    mock.script("plain streamed text")
    _, _, session = await open_rollout(mock)
    client = sdk(session)
    stream = await client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
    chunks = [chunk async for chunk in stream]
    await client.close()
    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "plain streamed text"
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_step_is_recorded_before_the_stream_ends(mock: MockModelServer) -> None:
    mock.script(Reply.text("one two three four", stream_delay=0.05))
    _, state, session = await open_rollout(mock)
    seen: list[tuple[str, int]] = []
    async with (
        httpx.AsyncClient(timeout=HANG_S) as http,
        http.stream(
            "POST",
            f"{session.base_url}/chat/completions",
            headers=auth(session.api_key),
            json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                seen.append((line[6:], len(state["trajectory"])))
    assert seen[-1][0] == "[DONE]"
    finish = next(i for i, (data, _) in enumerate(seen) if '"finish_reason":"stop"' in data)
    assert all(steps == 1 for _, steps in seen[finish:])  # recorded before the terminal events
    assert seen[1][1] == 0  # the first words were relayed while the upstream was still generating
    assert state["trajectory"][0]["completion"][0]["content"] == "one two three four"
    events = [json.loads(data) for data, _ in seen[:-1]]
    assert events[-1]["usage"]["completion_tokens"] == 4


async def test_harness_sampling_args_win_over_request_params(mock: MockModelServer) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        await client.chat.completions.create(
            model="ignored",
            messages=USER,  # type: ignore[arg-type]
            temperature=0.9,
            max_tokens=500,
            top_p=0.5,
            extra_body={"top_k": 3},
        )

    harness = vf.Harness(
        program=program,
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        sampling_args={"temperature": 0.1, "max_tokens": 7, "top_k": 40, "seed": None},
    )
    state = await harness.run({"prompt": "hi"})
    assert state["error"] is None
    body = mock.requests[0].body
    assert body["temperature"] == 0.1
    assert body["max_tokens"] == 7
    assert body["top_k"] == 40
    assert body["top_p"] == 0.5  # only the program set it
    assert "seed" not in body  # a harness arg set to None does not override (or send) anything
    assert body["model"] == "m"


async def test_request_after_the_session_is_closed_is_401(mock: MockModelServer) -> None:
    endpoint, state, session = await open_rollout(mock)
    client = sdk(session)
    first = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert first.choices[0].message.content == "hello"
    endpoint.close_session(state)
    assert session.closed
    with pytest.raises(openai.AuthenticationError) as caught:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_api_key"
    await client.close()
    with pytest.raises(vf.EndpointError, match="no open endpoint"):
        state.get_client()
    assert len(mock.requests) == 1


async def test_rollout_closed_by_harness_refuses_later_calls(mock: MockModelServer) -> None:
    captured: dict[str, str] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        captured.update(state.get_endpoint_config())
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            response = await http.post(
                f"{captured['base_url']}/chat/completions", headers=auth(captured["api_key"]), json={"messages": USER}
            )
        response.raise_for_status()

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m")
    state = await harness.run({"prompt": "hi"})
    assert state["error"] is None and len(state["trajectory"]) == 1
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        late = await http.post(
            f"{captured['base_url']}/chat/completions", headers=auth(captured["api_key"]), json={"messages": USER}
        )
    assert_openai_error(late, 401, type_="authentication_error", code="invalid_api_key", fragment="invalid or missing")
    assert len(mock.requests) == 1


# -- the endpoint inside harness runs -----------------------------------------------------------


async def test_endpoint_is_usable_from_update_reward_and_cleanup(mock: MockModelServer) -> None:
    mock.script("program answer", "update answer", "1.0", "cleanup answer")
    seen: dict[str, str] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        completion = await state.get_client().chat.completions.create(model="m", messages=USER)
        seen["program"] = completion.choices[0].message.content

    async def ask(state: vf.State, text: str) -> str:
        completion = await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        return completion.choices[0].message.content or ""

    async def note(state: vf.State) -> None:
        seen["update"] = await ask(state, "update?")

    @vf.reward
    async def judge(state: vf.State) -> float:
        return float(await ask(state, "judge?"))

    def sync_cleanup(state: vf.State) -> None:  # a sync handler, run in a worker thread, with the sync client
        completion = state.get_client(sync=True).chat.completions.create(model="m", messages=[{"role": "user", "content": "bye"}])
        seen["cleanup"] = completion.choices[0].message.content

    harness = vf.Harness(
        program=program,
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        max_turns=1,  # the handler calls must not count against the turn limit either
        updates=[note],
        rewards=[judge],
        cleanups=[sync_cleanup],
    )
    state = await harness.run({"prompt": "hi"})
    assert state["error"] is None
    assert seen == {"program": "program answer", "update": "update answer", "cleanup": "cleanup answer"}
    assert state["reward"] == 1.0
    assert len(mock.requests) == 4
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["program answer"]
    assert state["stop_condition"] == "state_done"


async def test_max_turns_is_enforced_at_the_endpoint(mock: MockModelServer) -> None:
    refusals: list[tuple[int, str | None]] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        for _ in range(20):
            try:
                await client.chat.completions.create(model="m", messages=USER)
            except openai.BadRequestError as exc:
                refusals.append((exc.status_code, exc.code))
                raise

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", max_turns=3)
    state = await harness.run({"prompt": "hi"})
    assert state["stop_condition"] == "max_turns_reached"
    assert state["is_completed"] is True
    assert state["error"] is None
    assert len(state["trajectory"]) == 3
    assert len(mock.requests) == 3
    assert refusals == [(400, "max_turns_reached")]


async def test_task_max_turns_overrides_the_harness(mock: MockModelServer) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        while True:
            await state.get_client().chat.completions.create(model="m", messages=USER)

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", max_turns=5)
    state = await harness.run({"prompt": "hi", "max_turns": 2})
    assert state["stop_condition"] == "max_turns_reached"
    assert state["error"] is None
    assert len(state["trajectory"]) == 2


async def test_upstream_failure_is_recorded_and_program_gets_502(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "boom upstream"))
    caught: list[openai.APIStatusError] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        try:
            await state.get_client().chat.completions.create(model="m", messages=USER)
        except openai.APIStatusError as exc:
            caught.append(exc)
            raise

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m")
    state = await harness.run({"prompt": "hi"})
    assert len(caught) == 1
    error = caught[0]
    assert error.status_code == 502
    assert isinstance(error.body, dict)
    assert error.body["type"] == "upstream_error" and error.body["code"] == "upstream_error"
    assert "boom upstream" in error.body["message"]
    assert state["stop_condition"] == "has_error"
    assert state["error"]["type"] == "ModelError"
    assert state["error"]["where"] == "model"
    assert "boom upstream" in state["error"]["message"]
    assert state["trajectory"] == []
    assert len(mock.requests) == 1


async def test_calls_after_an_upstream_failure_are_refused(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "boom"))
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        url = f"{session.base_url}/chat/completions"
        failed = await http.post(url, headers=auth(session.api_key), json={"messages": USER})
        again = await http.post(url, headers=auth(session.api_key), json={"messages": USER})
    assert_openai_error(failed, 502, type_="upstream_error", code="upstream_error", fragment="upstream model call failed")
    assert_openai_error(again, 400, type_="invalid_request_error", code="has_error", fragment="has_error")
    assert state["stop_condition"] == "has_error"
    assert len(mock.requests) == 1


async def test_upstream_overlong_prompt_stops_the_rollout(mock: MockModelServer) -> None:
    mock.script(Reply.fail(400, "This model's maximum context length is 8 tokens"))
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/chat/completions", headers=auth(session.api_key), json={"messages": USER})
    assert_openai_error(
        response, 400, type_="invalid_request_error", code="context_length_exceeded", fragment="maximum context length"
    )
    assert state["stop_condition"] == "prompt_too_long"
    assert state["is_truncated"] is True
    assert state["error"] is None


async def test_upstream_auth_failure_is_passed_on(mock: MockModelServer) -> None:
    mock.script(Reply.fail(401, "upstream says no"))
    _, state, session = await open_rollout(mock)
    client = sdk(session)
    with pytest.raises(openai.AuthenticationError) as caught:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    await client.close()
    assert caught.value.status_code == 401
    assert caught.value.code == "upstream_auth"
    assert "upstream rejected the credentials" in caught.value.message
    assert state["stop_condition"] == "has_error"
    assert state["error"]["type"] == "AuthenticationError"


async def test_malformed_upstream_response_is_502() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"message": {"content": None, "tool_calls": [{"id": "c1"}]}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        endpoint = await get_endpoint()
        state = vf.State.for_task({"prompt": "hi"})
        upstream(state).client = await resolve_client(
            vf.ClientConfig(api_base_url=f"http://127.0.0.1:{runner.addresses[0][1]}/v1", max_retries=0)
        )
        state.runtime.model = "m"
        session = endpoint.open(state)
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            response = await http.post(
                f"{session.base_url}/chat/completions", headers=auth(session.api_key), json={"messages": USER}
            )
    finally:
        await runner.cleanup()
    assert_openai_error(response, 502, type_="upstream_error", code="upstream_error", fragment="cannot read the model's response")
    assert state["error"]["type"] == "InvalidModelResponseError"
    assert state["error"]["where"] == "model"


async def test_token_ids_pass_through_and_are_recorded(mock: MockModelServer) -> None:
    mock.script(Reply.text("alpha beta gamma", completion_ids=[11, 12, 13], logprobs=[-0.1, -0.2, -0.3]))
    _, state, session = await open_rollout(mock, sampling_args={"logprobs": True, "return_token_ids": True})
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/chat/completions", headers=auth(session.api_key), json={"messages": USER})
    body = response.json()
    choice = body["choices"][0]
    assert choice["token_ids"] == [11, 12, 13]
    assert body["prompt_token_ids"] == mock_token_ids("user: hello")
    assert [item["logprob"] for item in choice["logprobs"]["content"]] == [-0.1, -0.2, -0.3]
    tokens = state["trajectory"][0]["tokens"]
    assert tokens["completion_ids"] == [11, 12, 13]
    assert tokens["completion_logprobs"] == [-0.1, -0.2, -0.3]
    assert tokens["prompt_ids"] == mock_token_ids("user: hello")
    assert tokens["completion_mask"] == [1, 1, 1]


async def test_plain_response_has_no_tokens(mock: MockModelServer) -> None:
    _, state, session = await open_rollout(mock)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        response = await http.post(f"{session.base_url}/chat/completions", headers=auth(session.api_key), json={"messages": USER})
    assert "prompt_token_ids" not in response.json()
    assert response.json()["choices"][0]["logprobs"] is None
    assert state["trajectory"][0]["tokens"] is None


async def test_reasoning_content_is_relayed(mock: MockModelServer) -> None:
    reply = Reply.text("4", reasoning_content="two plus two")
    mock.script(reply, reply)
    _, state, session = await open_rollout(mock)
    url = f"{session.base_url}/chat/completions"
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        plain = await http.post(url, headers=auth(session.api_key), json={"messages": USER})
        streamed = await http.post(url, headers=auth(session.api_key), json={"messages": USER, "stream": True})
    assert plain.json()["choices"][0]["message"]["reasoning_content"] == "two plus two"
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["delta"].get("reasoning_content") or "" for e in events) == "two plus two"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "4"
    assert state["trajectory"][0]["completion"][0]["reasoning_content"] == "two plus two"


async def test_multi_turn_messages_are_forwarded_unchanged(mock: MockModelServer) -> None:
    mock.script(Reply.tool("add", {"a": 1, "b": 2}), "the sum is 3")
    _, state, session = await open_rollout(mock)
    client = sdk(session)
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "1+2?"}]},
    ]
    first = await client.chat.completions.create(model="m", messages=messages, tools=TOOL_SPEC)  # type: ignore[arg-type]
    call = (first.choices[0].message.tool_calls or [])[0]
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "3"},
    ]
    second = await client.chat.completions.create(model="m", messages=messages, tools=TOOL_SPEC)  # type: ignore[arg-type]
    await client.close()
    assert second.choices[0].message.content == "the sum is 3"
    assert mock.requests[1].messages == messages
    assert state["trajectory"][1]["prompt"] == messages
    assert [step["completion"][0].get("tool_calls") is not None for step in state["trajectory"]] == [True, False]


async def test_stop_handler_is_checked_before_each_call(mock: MockModelServer) -> None:
    refusals: list[str | None] = []

    def enough(state: vf.State) -> bool:
        return len(state["trajectory"]) >= 2

    async def program(task: vf.Task, state: vf.State) -> None:
        for _ in range(5):
            try:
                await state.get_client().chat.completions.create(model="m", messages=USER)
            except openai.BadRequestError as exc:
                refusals.append(exc.code)
                return

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", stops=[enough])
    state = await harness.run({"prompt": "hi"})
    assert refusals == ["enough"]
    assert state["stop_condition"] == "enough"
    assert state["error"] is None
    assert len(state["trajectory"]) == 2 and len(mock.requests) == 2


# -- one server per loop, closed with the loop ---------------------------------------------------


async def test_one_endpoint_server_per_loop(mock: MockModelServer) -> None:
    ports: list[tuple[str, int]] = []
    ids: dict[str, str] = {}

    async def child_program(task: vf.Task, state: vf.State) -> None:
        ports.append(("child", port_of(state.get_endpoint_config()["base_url"])))
        ids["child"] = state["trajectory_id"]
        await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "child call"}])

    child_harness = vf.Harness(program=child_program)

    async def parent_program(task: vf.Task, state: vf.State) -> None:
        ports.append(("parent", port_of(state.get_endpoint_config()["base_url"])))
        ids["parent"] = state["trajectory_id"]
        await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "parent call"}])
        child_task = vf.Task({"prompt": "child"})
        child_state = state.for_task(child_task, borrow=["model"])
        result = await child_harness.run(child_task, child_state)
        state["child_steps"] = len(result["trajectory"])
        state["child_error"] = result["error"]

    async def other_program(task: vf.Task, state: vf.State) -> None:
        ports.append(("other", port_of(state.get_endpoint_config()["base_url"])))
        await state.get_client().chat.completions.create(model="m", messages=USER)

    config = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    parent = vf.Harness(program=parent_program, client=config, model="m")
    other = vf.Harness(program=other_program, client=config, model="m")
    states = await asyncio.gather(parent.run({"prompt": "p"}), other.run({"prompt": "o"}), other.run({"prompt": "o2"}))
    endpoint = await get_endpoint()
    assert endpoint is await get_endpoint()
    assert sorted(name for name, _ in ports) == ["child", "other", "other", "parent"]
    assert {port for _, port in ports} == {endpoint.port}
    parent_state = states[0]
    assert parent_state["error"] is None and parent_state["child_error"] is None
    assert parent_state["child_steps"] == 1
    assert [s["completion"][0]["content"] for s in parent_state["trajectory"]] == ["parent call"]  # the child's call is its own
    assert ids["child"] != ids["parent"]
    assert all(len(s["trajectory"]) == 1 for s in states[1:])
    assert endpoint.sessions == {}  # every rollout was closed


def test_endpoint_closes_when_the_loop_shuts_down() -> None:
    async def main(mock: MockModelServer) -> int:
        endpoint, _, session = await open_rollout(mock)
        client = sdk(session)
        completion = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        await client.close()
        assert completion.choices[0].message.content == "hello"
        assert port_of(session.base_url) == endpoint.port
        return port_of(session.base_url)

    with MockModelServer() as mock:
        port = asyncio.run(main(mock))
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        second_port = asyncio.run(main(mock))  # a new loop gets a new, working server
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", second_port), timeout=2):
            pass
    assert len(mock.requests) == 2


async def test_hundreds_of_simultaneous_connects_fit_the_listen_queue() -> None:
    """While the loop is busy (nothing accepted), 300 connects must all complete in the kernel's queue.

    With aiohttp's default backlog of 128 the 130th connect is dropped and only retried a second later.
    """
    import socket

    endpoint = await get_endpoint()
    sockets = []
    try:
        for _ in range(300):  # no await in this loop: the endpoint can't accept meanwhile
            sockets.append(socket.create_connection(("127.0.0.1", endpoint.port), timeout=0.5))
    finally:
        for sock in sockets:
            sock.close()
    assert len(sockets) == 300
