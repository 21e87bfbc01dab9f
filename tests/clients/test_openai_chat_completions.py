"""The upstream OpenAI Chat Completions client and the client registry, against real HTTP servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from aiohttp import web

import v1 as vf
from v1.clients import OpenAIChatCompletionsClient, resolve_client, shared_client
from v1.testing import MockModelServer, Reply, mock_token_ids

PROMPT = [{"role": "user", "content": "what is one plus two"}]
ADD_TOOL = vf.Tool(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def config(mock_or_url: MockModelServer | str, **kwargs: Any) -> vf.ClientConfig:
    url = mock_or_url if isinstance(mock_or_url, str) else mock_or_url.url
    return vf.ClientConfig(api_base_url=url, **{"max_retries": 0, **kwargs})


# -- response translation ------------------------------------------------------------------------


async def test_response_translation(mock: MockModelServer) -> None:
    reply = Reply.tool("add", {"a": 1, "b": 2}, content="Adding.", reasoning_content="one plus two")
    mock.script(reply)
    client = await resolve_client(config(mock))
    assert isinstance(client, OpenAIChatCompletionsClient)
    response = await client.get_response(PROMPT, "policy", {}, tools=[ADD_TOOL])

    assert response.id.startswith("chatcmpl-mock-")
    assert response.model == "policy"
    message = response.message
    assert message.content == "Adding."
    assert message.reasoning_content == "one plus two"
    assert message.finish_reason == "tool_calls"
    assert message.is_truncated is False
    assert message.tokens is None  # not asked for
    assert message.tool_calls == [vf.ToolCall(id=reply.tool_calls[0]["id"], name="add", arguments='{"a": 1, "b": 2}')]
    prompt_tokens = len(mock_token_ids("user: what is one plus two"))
    completion_tokens = len(mock_token_ids("Adding."))
    assert response.usage == vf.Usage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
    )

    sent = mock.requests[0].body
    assert sent["model"] == "policy"
    assert sent["messages"] == PROMPT
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_TOOL.parameters},
        }
    ]


async def test_string_prompt_and_length_finish(mock: MockModelServer) -> None:
    mock.script(Reply.text("cut off mid", finish_reason="length"))
    client = await resolve_client(config(mock))
    response = await client.get_response("just a string", "m", {})
    assert mock.requests[0].body["messages"] == [{"role": "user", "content": "just a string"}]
    assert "tools" not in mock.requests[0].body
    assert response.message.content == "cut off mid"
    assert response.message.finish_reason == "length"
    assert response.message.is_truncated is True
    assert response.message.tool_calls is None


# -- retries and errors ---------------------------------------------------------------------------


async def test_retries_until_success(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "first"), Reply.fail(503, "second"), Reply.text("third time lucky"))
    client = await resolve_client(config(mock, max_retries=2))
    response = await client.get_response(PROMPT, "m", {})
    assert response.message.content == "third time lucky"
    assert len(mock.requests) == 3


async def test_retries_exhausted_raise_model_error(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "down"), Reply.fail(500, "still down"), Reply.text("too late"))
    client = await resolve_client(config(mock, max_retries=1))
    with pytest.raises(vf.ModelError, match="still down"):
        await client.get_response(PROMPT, "m", {})
    assert len(mock.requests) == 2


async def test_no_retries_500_raises_model_error(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "boom"))
    client = await resolve_client(config(mock, max_retries=0))
    with pytest.raises(vf.ModelError, match="boom") as caught:
        await client.get_response(PROMPT, "m", {})
    assert type(caught.value) is vf.ModelError
    assert "InternalServerError" in str(caught.value)
    assert isinstance(caught.value.__cause__, openai.InternalServerError)
    assert len(mock.requests) == 1


async def test_client_errors_are_not_retried(mock: MockModelServer) -> None:
    mock.script(Reply.fail(400, "bad parameter"))
    client = await resolve_client(config(mock, max_retries=3))
    with pytest.raises(vf.ModelError, match="bad parameter") as caught:
        await client.get_response(PROMPT, "m", {})
    assert not isinstance(caught.value, vf.OverlongPromptError)
    assert len(mock.requests) == 1


async def test_rate_limit_is_retried(mock: MockModelServer) -> None:
    mock.script(Reply.fail(429, "slow down"), Reply.text("ok"))
    client = await resolve_client(config(mock, max_retries=1))
    response = await client.get_response(PROMPT, "m", {})
    assert response.message.content == "ok"
    assert len(mock.requests) == 2


@pytest.mark.parametrize(
    "message",
    ["This model's maximum context length is 4096 tokens", "prompt is too long: 9000 tokens > 8192 maximum"],
)
async def test_overlong_prompt_error(mock: MockModelServer, message: str) -> None:
    mock.script(Reply.fail(400, message))
    client = await resolve_client(config(mock, max_retries=2))
    with pytest.raises(vf.OverlongPromptError, match="prompt too long") as caught:
        await client.get_response(PROMPT, "m", {})
    assert message in str(caught.value)
    assert isinstance(caught.value, vf.ModelError)
    assert len(mock.requests) == 1


@pytest.mark.parametrize(("status", "error_type"), [(401, openai.AuthenticationError), (403, openai.PermissionDeniedError)])
async def test_auth_errors_surface_unchanged(mock: MockModelServer, status: int, error_type: type[Exception]) -> None:
    mock.script(Reply.fail(status, "bad key"))
    client = await resolve_client(config(mock, max_retries=2))
    with pytest.raises(error_type) as caught:
        await client.get_response(PROMPT, "m", {})
    assert not isinstance(caught.value, vf.Error)
    assert "bad key" in str(caught.value)
    assert len(mock.requests) == 1


async def test_connection_error_is_model_error() -> None:
    with MockModelServer() as gone:
        url = gone.url
    client = await resolve_client(config(url, max_retries=0, connect_timeout=2))
    # The SDK's transports word this differently (a connection error, or a connect timeout);
    # either way the root cause names the refused connection.
    with pytest.raises(vf.ModelError, match=r"(?i)caused by .*connect"):
        await client.get_response(PROMPT, "m", {})


@pytest.mark.parametrize(
    ("url", "connect_timeout", "wait"),
    [
        ("http://127.0.0.1:8000/v1", 5.0, 60.0),
        ("http://127.9.9.9:8000/v1", 5.0, 60.0),
        ("http://localhost:8000/v1", 5.0, 60.0),
        ("http://[::1]:8000/v1", 5.0, 60.0),
        ("http://127.0.0.1:8000/v1", 90.0, 90.0),
        ("https://api.example.com/v1", 5.0, 5.0),
        ("http://10.0.0.7:8000/v1", 2.0, 2.0),
        ("http://localhost.example.com/v1", 5.0, 5.0),
    ],
)
async def test_a_loopback_upstream_waits_at_least_a_minute_to_connect_and_a_remote_one_its_connect_timeout(
    monkeypatch: pytest.MonkeyPatch, url: str, connect_timeout: float, wait: float
) -> None:
    # A loopback connect is answered by the kernel at once; a wait there means this process is starved
    # (a loaded machine), and a 5 s limit failed calls to a healthy local server. A remote host keeps its limit.
    monkeypatch.setenv("PRIME_API_KEY", "k")
    built = await resolve_client(config(url, connect_timeout=connect_timeout))
    assert built.config.connect_wait == wait
    assert built.client.timeout.connect == wait


# -- tokens, sampling args, headers ----------------------------------------------------------------


async def test_token_ids_and_logprobs_are_parsed(mock: MockModelServer) -> None:
    mock.script(Reply.text("four score and seven"), Reply.text("x", completion_ids=[5, 6, 7], logprobs=[-1.0, -2.0, -3.0]))
    client = await resolve_client(config(mock))
    response = await client.get_response(PROMPT, "m", {"logprobs": True, "return_token_ids": True})
    tokens = response.message.tokens
    assert tokens is not None
    assert tokens.prompt_ids == mock_token_ids("user: what is one plus two")
    assert tokens.prompt_mask == [0] * len(tokens.prompt_ids)
    assert tokens.completion_ids == mock_token_ids("four score and seven")
    assert tokens.completion_mask == [1, 1, 1, 1]
    assert tokens.completion_logprobs == pytest.approx([-0.01, -0.02, -0.03, -0.04])
    body = mock.requests[0].body
    assert body["logprobs"] is True
    assert body["return_token_ids"] is True

    explicit = await client.get_response(PROMPT, "m", {"logprobs": True, "return_token_ids": True})
    assert explicit.message.tokens is not None
    assert explicit.message.tokens.completion_ids == [5, 6, 7]
    assert explicit.message.tokens.completion_logprobs == [-1.0, -2.0, -3.0]


async def test_token_ids_without_logprobs_get_zero_logprobs(mock: MockModelServer) -> None:
    mock.script(Reply.text("a b c"))
    client = await resolve_client(config(mock))
    response = await client.get_response(PROMPT, "m", {"return_token_ids": True})
    assert response.message.tokens is not None
    assert response.message.tokens.completion_ids == mock_token_ids("a b c")
    assert response.message.tokens.completion_logprobs == [0.0, 0.0, 0.0]


async def test_logprobs_alone_give_no_tokens(mock: MockModelServer) -> None:
    client = await resolve_client(config(mock))
    response = await client.get_response(PROMPT, "m", {"logprobs": True})
    assert response.message.tokens is None


async def test_unknown_sampling_args_go_to_extra_body(mock: MockModelServer) -> None:
    client = await resolve_client(config(mock))
    await client.get_response(
        PROMPT,
        "m",
        {
            "temperature": 0.3,
            "max_tokens": 12,
            "top_k": 20,
            "repetition_penalty": 1.1,
            "chat_template_kwargs": {"enable_thinking": False},
            "seed": None,
            "min_p": None,
        },
    )
    body = mock.requests[0].body
    assert body["temperature"] == 0.3
    assert body["max_tokens"] == 12
    assert body["top_k"] == 20
    assert body["repetition_penalty"] == 1.1
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "seed" not in body and "min_p" not in body
    assert "extra_body" not in body


async def test_extra_headers_and_headers_from_state(mock: MockModelServer) -> None:
    client = await resolve_client(
        config(
            mock, extra_headers={"X-Team": "evals"}, extra_headers_from_state={"X-Rollout": "trajectory_id", "X-Absent": "nope"}
        )
    )
    state = vf.State()
    await client.get_response(PROMPT, "m", {}, state=state)
    await client.get_response(PROMPT, "m", {})
    with_state = {key.lower(): value for key, value in mock.requests[0].headers.items()}
    without_state = {key.lower(): value for key, value in mock.requests[1].headers.items()}
    assert with_state["x-team"] == "evals"
    assert with_state["x-rollout"] == state["trajectory_id"]
    assert "x-absent" not in with_state  # a missing state field sends no header
    assert without_state["x-team"] == "evals"
    assert "x-rollout" not in without_state


async def test_api_key_comes_from_the_named_variable(mock: MockModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_TEST_UPSTREAM_KEY", "sk-test-123")
    client = await resolve_client(config(mock, api_key_var="V1_TEST_UPSTREAM_KEY"))
    await client.get_response(PROMPT, "m", {})
    headers = {key.lower(): value for key, value in mock.requests[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-test-123"


# -- the registry -------------------------------------------------------------------------------------


async def test_equal_configs_share_one_client(mock: MockModelServer) -> None:
    first = await shared_client(config(mock))
    again = await resolve_client(config(mock))
    from_dict = await resolve_client({"api_base_url": mock.url, "max_retries": 0})
    different = await resolve_client(config(mock, max_retries=1))
    assert first is again is from_dict
    assert different is not first
    assert isinstance(different, OpenAIChatCompletionsClient)
    assert different.max_retries == 1 and first.max_retries == 0
    assert await resolve_client(first) is first  # a Client passes through


async def test_a_config_changed_in_place_gets_the_client_of_its_new_content(mock: MockModelServer) -> None:
    """A config object resolves to its shared client without a JSON key per call, yet a change made in place
    (a field, or a nested dict) is seen: it gets the client of what it says now."""
    first = config(mock)
    client = await shared_client(first)
    assert await shared_client(first) is client
    first.max_retries = 2
    retrying = await shared_client(first)
    assert retrying is not client and retrying is await shared_client(config(mock, max_retries=2))
    first.extra_headers["X-Run"] = "b"
    with_header = await shared_client(first)
    assert with_header is not retrying and with_header is await shared_client(first)
    first.extra_headers.clear()
    assert await shared_client(first) is retrying


async def test_a_nested_endpoint_config_changed_in_place_gets_the_client_of_its_new_content(mock: MockModelServer) -> None:
    """A change inside one of `endpoint_configs`' models (its headers dict) is seen too."""
    first = config(mock, endpoint_configs=[{"api_base_url": mock.url, "max_retries": 0}])
    client = await shared_client(first)
    assert await shared_client(first) is client
    first.endpoint_configs[0].extra_headers["X-Run"] = "c"
    changed = await shared_client(first)
    assert changed is not client
    assert changed is await shared_client(
        config(mock, endpoint_configs=[{"api_base_url": mock.url, "max_retries": 0, "extra_headers": {"X-Run": "c"}}])
    )


async def test_concurrent_first_use_creates_one_client(mock: MockModelServer) -> None:
    clients = await asyncio.gather(*(resolve_client(config(mock, timeout=123.0)) for _ in range(10)))
    assert all(client is clients[0] for client in clients)


def test_shared_clients_are_per_loop_and_closed_with_it() -> None:
    async def get(mock: MockModelServer) -> OpenAIChatCompletionsClient:
        client = await resolve_client(config(mock))
        assert isinstance(client, OpenAIChatCompletionsClient)
        assert (await client.get_response(PROMPT, "m", {})).message.content == "what is one plus two"
        assert not client.client.is_closed()
        return client

    with MockModelServer() as mock:
        first = asyncio.run(get(mock))
        second = asyncio.run(get(mock))
    assert first is not second
    assert first.client.is_closed() and second.client.is_closed()


async def test_async_openai_object_is_wrapped_once(mock: MockModelServer) -> None:
    sdk = openai.AsyncOpenAI(base_url=mock.url, api_key="k", max_retries=0)
    wrapped = await resolve_client(sdk)
    assert isinstance(wrapped, OpenAIChatCompletionsClient)
    assert await resolve_client(sdk) is wrapped
    assert wrapped.client is sdk
    assert wrapped.max_retries == 0
    other = await resolve_client(openai.AsyncOpenAI(base_url=mock.url, api_key="k", max_retries=0))
    assert other is not wrapped
    response = await wrapped.get_response(PROMPT, "m", {"top_k": 5})
    assert response.message.content == "what is one plus two"
    assert mock.requests[0].body["top_k"] == 5
    await wrapped.close()  # it does not own the SDK client: still usable
    assert not sdk.is_closed()
    await sdk.close()


async def test_async_openai_like_adapter_is_accepted(mock: MockModelServer) -> None:
    """Anything with an async `chat.completions.create` works, e.g. a trainer's adapter returning a pydantic object."""
    sdk = openai.AsyncOpenAI(base_url=mock.url, api_key="k", max_retries=0)
    calls: list[dict[str, Any]] = []

    class Completions:
        async def create(self, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return await sdk.chat.completions.create(**kwargs)

    class Chat:
        completions = Completions()

    class Adapter:
        chat = Chat()

    client = await resolve_client(Adapter())
    mock.script(Reply.tool("add", {"a": 1}, content="sure"))
    response = await client.get_response(PROMPT, "m", {"temperature": 0.0}, tools=[ADD_TOOL])
    assert response.message.content == "sure"
    assert response.message.tool_calls is not None and response.message.tool_calls[0].name == "add"
    assert calls[0]["temperature"] == 0.0 and calls[0]["model"] == "m"
    await sdk.close()


async def test_sync_openai_object_is_wrapped_once_and_answers(mock: MockModelServer) -> None:
    sync = openai.OpenAI(base_url=mock.url, api_key="k", max_retries=0)
    wrapped = await resolve_client(sync)
    assert await resolve_client(sync) is wrapped
    response = await wrapped.get_response(PROMPT, "m", {"top_k": 5})
    assert response.message.content == "what is one plus two"
    assert mock.requests[0].body["top_k"] == 5
    sync.close()


async def test_a_sync_create_is_still_a_config_error(mock: MockModelServer) -> None:
    class Completions:
        def create(self, **kwargs: Any) -> Any:
            return {}

    class Adapter:
        chat = type("Chat", (), {"completions": Completions()})()

    with pytest.raises(vf.ConfigError, match=r"is not async; pass an AsyncOpenAI or an openai\.OpenAI"):
        await resolve_client(Adapter())


@pytest.mark.parametrize("value", [object(), "http://localhost:8000/v1", 42, None])
async def test_random_object_is_a_config_error(value: Any) -> None:
    with pytest.raises(vf.ConfigError, match="expected a ClientConfig, a v1 Client or an AsyncOpenAI-like object"):
        await resolve_client(value)


async def test_endpoint_configs_round_robin_across_upstreams(mock: MockModelServer) -> None:
    with MockModelServer(lambda request: "from the second") as second:
        config = vf.ClientConfig(
            max_retries=0,
            extra_headers={"X-Shared": "yes"},
            endpoint_configs=[
                {"api_base_url": mock.url, "extra_headers": {"X-Upstream": "1"}},
                {"api_base_url": second.url, "extra_headers": {"X-Upstream": "2"}},
            ],
        )
        client = await resolve_client(config)
        answers = [(await client.get_response([{"role": "user", "content": "hi"}], "m", {})).message.content for _ in range(4)]
    assert answers == ["hi", "from the second", "hi", "from the second"]
    assert len(mock.requests) == 2
    headers = [{key.lower(): value for key, value in r.headers.items()} for r in mock.requests]
    assert [h["x-upstream"] for h in headers] == ["1", "1"]
    assert all(h["x-shared"] == "yes" for h in headers)


# -- unusable responses (a tiny server that answers whatever we tell it to) ------------------------


@pytest.fixture
async def raw_server() -> AsyncIterator[tuple[str, list[Any]]]:
    """Answers each chat completion with the next queued JSON value (status 200)."""
    queue: list[Any] = []

    async def answer(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(queue.pop(0)), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/v1", queue
    await runner.cleanup()


@pytest.mark.parametrize(
    ("answer", "error", "fragment"),
    [
        pytest.param({"id": "x", "choices": []}, vf.InvalidModelResponseError, "no usable choices", id="empty-choices"),
        pytest.param({"id": "x"}, vf.InvalidModelResponseError, "no usable choices", id="no-choices"),
        pytest.param({"choices": [{"index": 0}]}, vf.InvalidModelResponseError, "no usable choices", id="choice-without-message"),
        pytest.param([1, 2], vf.InvalidModelResponseError, "expected a JSON object", id="not-an-object"),
        pytest.param({"error": {"message": "overloaded"}}, vf.ModelError, "upstream returned an error", id="error-with-200"),
        pytest.param(
            {"choices": [{"message": {"content": None, "tool_calls": [{"id": "c1"}]}}]},
            vf.InvalidModelResponseError,
            "cannot read the model's response: KeyError",
            id="tool-call-without-function",
        ),
        pytest.param(
            {"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}]}}]},
            vf.InvalidModelResponseError,
            "cannot read the model's response",
            id="tool-arguments-not-a-string",
        ),
    ],
)
async def test_unusable_response(raw_server: tuple[str, list[Any]], answer: Any, error: type[Exception], fragment: str) -> None:
    url, queue = raw_server
    queue.extend([answer] * 3)
    client = await resolve_client(config(url, max_retries=2))
    with pytest.raises(error, match=fragment):
        await client.get_response(PROMPT, "m", {})
    # an unusable answer is asked for again like a connection error (3 attempts); an error the upstream reports is final
    assert len(queue) == (0 if error is vf.InvalidModelResponseError else 2)


async def test_unusable_answer_is_retried_until_a_usable_one(raw_server: tuple[str, list[Any]]) -> None:
    url, queue = raw_server
    queue.extend([{"id": "x", "choices": []}, [1, 2], {"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}]}])
    client = await resolve_client(config(url, max_retries=2))
    retried: list[str] = []
    response = await client.get_response(PROMPT, "m", {}, on_retry=lambda exc: retried.append(type(exc).__name__))
    assert response.message.content == "fine"
    assert retried == ["InvalidModelResponseError", "InvalidModelResponseError"]


async def test_minimal_valid_response(raw_server: tuple[str, list[Any]]) -> None:
    url, queue = raw_server
    queue.append({"choices": [{"message": {"content": "bare"}}]})
    client = await resolve_client(config(url))
    response = await client.get_response(PROMPT, "m", {})
    assert response.message.content == "bare"
    assert response.usage is None
    assert response.message.finish_reason is None
    assert response.created > 0


def test_nested_extra_body_in_sampling_args_is_merged() -> None:
    from v1.clients._openai_chat_completions import split_sampling_args

    known, extra = split_sampling_args({"temperature": 0.5, "top_k": 20, "extra_body": {"min_p": 0.1, "top_k": 5}})
    assert known == {"temperature": 0.5}
    assert extra == {"min_p": 0.1, "top_k": 20}, "flat unknown args win over the nested extra_body"
