"""The OpenAI wire (`v1.clients`): what reaches the upstream, and every way an answer can go wrong.

A config-built Chat Completions client posts over the wire; these tests check it sends what the
official SDK would send and fails the way the SDK fails, against real aiohttp servers on loopback.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from aiohttp import web

import v1 as vf
from tests.clients.conftest import Handler
from tests.tools.patience import HANG_S
from v1.clients import resolve_client
from v1.clients._openai_wire import PLAIN_HTTP_ENV, OpenAIWire, SSEParser, proxied, status_error
from v1.testing import MockModelServer

PROMPT = [{"role": "user", "content": "hi"}]
ANSWER = {"id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}


@pytest.fixture(autouse=True, params=["plain-pool", "aiohttp"])
def whole_answers_through(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test on both carriers of a plain-HTTP upstream's whole answers: the plain pool, and aiohttp (as TLS and
    proxies are carried): what reaches the upstream and what comes back must not depend on which."""
    monkeypatch.setenv(PLAIN_HTTP_ENV, "1" if request.param == "plain-pool" else "0")


def sse(*events: Any, done: bool = True) -> bytes:
    body = b"".join(f"data: {json.dumps(event)}\n\n".encode() for event in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def chunk(content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    return {"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


async def client_for(url: str, **config: Any) -> Any:
    client = await resolve_client(vf.ClientConfig(api_base_url=url, **{"max_retries": 0, **config}))
    assert client.wire is not None, "a config-built client posts over the wire"
    return client


async def test_the_request_carries_the_sdks_headers_the_key_and_the_json_body(
    serve: Callable[[Handler], Awaitable[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, dict[str, str], Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.path, dict(request.headers), await request.json()))
        return web.json_response(ANSWER)

    monkeypatch.setenv("V1_WIRE_KEY", "sk-wire")
    client = await client_for(await serve(handler), api_key_var="V1_WIRE_KEY", extra_headers={"X-Team": "evals"})
    response = await client.get_response(PROMPT, "m", {"temperature": 0.5, "top_k": 3})
    assert response.message.content == "hello"
    path, headers, body = seen[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-wire"
    assert headers["X-Team"] == "evals"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == client.client.user_agent  # the SDK's own
    assert body == {"temperature": 0.5, "model": "m", "messages": PROMPT, "top_k": 3}  # extra_body merged at the top


async def test_a_header_from_the_state_replaces_the_configured_one_of_the_same_name(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[list[tuple[str, str]]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append([(name, value) for name, value in request.headers.items() if name.lower() == "x-session-id"])
        return web.json_response(ANSWER)

    client = await client_for(
        await serve(handler),
        extra_headers={"X-Session-ID": "configured"},
        extra_headers_from_state={"X-Session-ID": "example_id"},
    )
    await client.get_response(PROMPT, "m", {}, state={"example_id": 7})
    await client.get_response(PROMPT, "m", {})
    assert seen == [[("X-Session-ID", "7")], [("X-Session-ID", "configured")]]  # one value each: the state's wins


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (409, openai.ConflictError),
        (418, openai.APIStatusError),
        (422, openai.UnprocessableEntityError),
        (429, openai.RateLimitError),
        (503, openai.InternalServerError),
    ],
)
def test_status_errors_are_the_sdks_classes_and_wording(status: int, error_class: type[Exception]) -> None:
    error = status_error(status, {"x": "y"}, b'{"error": {"message": "nope", "code": "c"}}', "http://u/v1/chat/completions")
    assert type(error) is error_class
    assert str(error) == f"Error code: {status} - nope"
    assert error.status_code == status
    assert error.body == {"message": "nope", "code": "c"}
    text = status_error(status, {}, b"<html>bad gateway</html>", "http://u")
    assert str(text) == f"Error code: {status}" and text.body == "<html>bad gateway</html>"


async def test_a_redirect_is_not_followed(serve: Callable[[Handler], Awaitable[str]]) -> None:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPTemporaryRedirect("/elsewhere")

    client = await client_for(await serve(handler))
    with pytest.raises(vf.ModelError, match="Error code: 307"):
        await client.get_response(PROMPT, "m", {})
    assert hits == ["/v1/chat/completions"], "the redirect was followed"


async def test_a_stream_is_relayed_across_arbitrary_chunk_boundaries(serve: Callable[[Handler], Awaitable[str]]) -> None:
    body = sse(chunk("Hel"), chunk("lo, "), chunk("world", "stop")).replace(b"\n", b"\r\n")

    async def handler(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        for i in range(0, len(body), 7):  # cut mid-line, mid-CRLF and mid-UTF-8 alike
            await answer.write(body[i : i + 7])
        return answer

    client = await client_for(await serve(handler))
    items = [item async for item in client.stream_response(PROMPT, "m", {})]
    assert "".join(item.content or "" for item in items[:-1]) == "Hello, world"
    assert items[-1].message.content == "Hello, world"


async def test_server_sent_events_parse_comments_events_multiline_data_and_a_missing_last_blank_line() -> None:
    body = b': keep-alive\n\nevent: delta\ndata: {"a":\ndata: 1}\n\ndata:{"b": 2}\n\nid: 7\nretry: 5\ndata: "last"'
    parser = SSEParser()
    events = [event for i in range(len(body)) for event in parser.feed(body[i : i + 1])] + parser.end()
    assert events == [("delta", '{"a":\n1}'), ("", '{"b": 2}'), ("", '"last"')]


async def test_a_huge_event_is_read_whole(serve: Callable[[Handler], Awaitable[str]]) -> None:
    text = "x" * 2_000_000  # one 2 MB line: no line-length limit applies

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=sse(chunk(text), chunk(None, "stop")), content_type="text/event-stream")

    client = await client_for(await serve(handler))
    items = [item async for item in client.stream_response(PROMPT, "m", {})]
    assert items[-1].message.content == text


async def test_an_error_event_fails_the_stream_as_the_sdk_does(serve: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.Response:
        event = {"error": {"message": "model overloaded mid-stream", "type": "server_error"}}
        return web.Response(body=sse(event), content_type="text/event-stream")

    client = await client_for(await serve(handler))
    with pytest.raises(vf.ModelError, match="model overloaded mid-stream"):
        [item async for item in client.stream_response(PROMPT, "m", {})]


async def test_event_data_that_is_not_json_is_an_unusable_answer_and_asked_again(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    answers = [b"data: {not json\n\n", sse(chunk("fine", "stop"))]

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=answers.pop(0), content_type="text/event-stream")

    client = await client_for(await serve(handler), max_retries=1)
    retried: list[str] = []
    items = [item async for item in client.stream_response(PROMPT, "m", {}, on_retry=lambda e: retried.append(type(e).__name__))]
    assert items[-1].message.content == "fine"
    assert retried == ["InvalidModelResponseError"]


async def test_a_refused_stream_is_a_status_error_with_the_upstreams_message(serve: Callable[[Handler], Awaitable[str]]) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "stream_options not supported"}}, status=400)

    client = await client_for(await serve(handler), max_retries=3)
    with pytest.raises(vf.ModelRequestError, match="stream_options not supported"):
        [item async for item in client.stream_response(PROMPT, "m", {})]


def test_proxied_follows_the_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert not proxied("https://api.example.com/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert proxied("https://api.example.com/v1")
    assert not proxied("http://127.0.0.1:8000/v1"), "an https proxy does not carry plain http"
    monkeypatch.setenv("NO_PROXY", "api.example.com")
    assert not proxied("https://api.example.com/v1")


async def test_a_proxy_from_the_environment_carries_the_requests(
    serve: Callable[[Handler], Awaitable[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    through_proxy: list[str] = []

    async def proxy(request: web.Request) -> web.Response:  # a forward proxy sees the absolute URL
        through_proxy.append(str(request.url))
        return web.json_response(ANSWER)

    proxy_url = (await serve(proxy)).removesuffix("/v1")
    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    client = await client_for("http://upstream.invalid/v1")
    response = await client.get_response(PROMPT, "m", {})
    assert response.message.content == "hello"
    assert through_proxy == ["http://upstream.invalid/v1/chat/completions"]


async def test_the_pool_is_closed_with_the_client(mock: MockModelServer) -> None:
    client = await client_for(mock.url)
    await client.get_response(PROMPT, "m", {})
    session = client.wire.session()
    await client.close()
    assert session.closed


async def test_a_wire_on_its_own_posts_and_streams(mock: MockModelServer) -> None:
    wire = OpenAIWire(mock.url, {"Authorization": "Bearer x"}, timeout=HANG_S, connect_timeout=HANG_S, max_connections=4)
    try:
        answer = await wire.post("chat/completions", {"model": "m", "messages": PROMPT})
        assert answer["choices"][0]["message"]["role"] == "assistant"
        stream = await wire.stream("/chat/completions", {"model": "m", "messages": PROMPT, "stream": True})
        chunks = [event async for event in stream]
        await stream.close()
        assert chunks and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    finally:
        await wire.close()


DEEP = b"[" * 200_000 + b"]" * 200_000


async def test_a_hostile_answer_is_one_line_not_a_recursion(serve: Callable[[Handler], Awaitable[str]]) -> None:
    """An upstream's body is outside data: nested 200,000 deep (whole, in a stream, in an error) it is one clear line."""

    async def hostile(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/logprobs"):  # a model server's logprob may be -Infinity: kept, as json.loads keeps it
            return web.Response(body=b'{"logprob": -Infinity, "nested": ' + b"[" * 100 + b"]" * 100 + b"}")
        if request.path.endswith("/error"):
            return web.Response(status=400, body=b'{"error": ' + DEEP + b"}", content_type="application/json")
        if (await request.json()).get("stream"):
            return web.Response(body=b"data: " + DEEP + b"\n\n", content_type="text/event-stream")
        return web.Response(body=b'{"choices": ' + DEEP + b"}", content_type="application/json")

    url = await serve(hostile)
    client = await client_for(url)
    with pytest.raises(vf.InvalidModelResponseError) as whole:
        await client.get_response(PROMPT, "m", {})
    assert str(whole.value) == f"the answer of {url}/chat/completions: nested more than 128 levels deep"
    wire = OpenAIWire(url, {}, timeout=HANG_S, connect_timeout=HANG_S, max_connections=4)
    try:
        stream = await wire.stream("/chat/completions", {"model": "m", "messages": PROMPT, "stream": True})
        with pytest.raises(vf.InvalidModelResponseError) as streamed:
            _ = [event async for event in stream]
        await stream.close()
        assert str(streamed.value).startswith("a streamed event's data: nested more than 128 levels deep: '[[[")
        with pytest.raises(openai.BadRequestError) as refused:  # an error body too deep to read is kept as its text
            await wire.post("/error", {})
        assert refused.value.status_code == 400 and str(refused.value) == "Error code: 400"
        assert (await wire.post("/logprobs", {}))["logprob"] == float("-inf")
    finally:
        await wire.close()
    await client.close()


# -- an upstream's answer is outside data: bounded in size and in total time -----------------------------


def test_the_sse_parser_reads_a_20_mib_line_whole_in_any_chunking() -> None:
    text = "y" * (20 * 2**20)
    body = f"data: {text}\n\n".encode()
    for size in (65536, 1_000_003):
        parser = SSEParser()
        events = [event for i in range(0, len(body), size) for event in parser.feed(body[i : i + size])] + parser.end()
        assert len(events) == 1 and events[0][0] == "" and events[0][1] == text


def limited_harness(url: str, **config: Any) -> vf.Harness:
    client = vf.ClientConfig(api_base_url=url, max_retries=2, **config)
    return vf.Harness(client=client, model="m", max_turns=1)


async def test_an_answer_past_max_response_bytes_fails_the_rollout_in_one_line(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    asked = []
    huge = json.dumps({**ANSWER, "padding": "z" * (3 * 2**20)})

    async def handler(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(text=huge, content_type="application/json")

    url = await serve(handler)
    state = await limited_harness(url, max_response_bytes=2**20).run({"prompt": "hi"})
    error = state["error"]
    assert error is not None and error["type"] == "ModelError", error
    assert (
        error["message"] == f"the answer of {url}/chat/completions is larger than 1048576 bytes (ClientConfig.max_response_bytes)"
    )
    assert len(asked) == 1  # not retried: the same server would send it again
    small = await limited_harness(url, max_response_bytes=2**23).run({"prompt": "hi"})
    assert small["error"] is None and small["completion"][-1]["content"] == "hello"


async def test_a_small_compressed_answer_that_decodes_past_max_response_bytes_is_refused(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """A declared length within the limit is read in one go only when nothing decodes it larger: 3 MiB gzip to ~3 KiB."""
    packed = gzip.compress(json.dumps({**ANSWER, "padding": "z" * (3 * 2**20)}).encode())
    assert len(packed) < 2**20

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=packed, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})

    url = await serve(handler)
    state = await limited_harness(url, max_response_bytes=2**20).run({"prompt": "hi"})
    error = state["error"]
    assert error is not None and error["type"] == "ModelError", error
    assert error["message"].endswith("is larger than 1048576 bytes (ClientConfig.max_response_bytes)")
    whole = await limited_harness(url, max_response_bytes=2**23).run({"prompt": "hi"})
    assert whole["error"] is None and whole["completion"][-1]["content"] == ANSWER["choices"][0]["message"]["content"]


async def test_an_answer_that_drips_forever_fails_the_rollout_at_response_timeout(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "application/json"})
        await answer.prepare(request)
        while True:  # a byte well within the read timeout, forever
            await answer.write(b" ")
            await asyncio.sleep(0.1)

    url = await serve(handler)
    state = await limited_harness(url, response_timeout=2, timeout=60).run({"prompt": "hi"})
    error = state["error"]
    assert error is not None and error["type"] == "ModelError", error
    assert error["message"] == f"the answer of {url}/chat/completions took longer than 2 s in all (ClientConfig.response_timeout)"


@pytest.mark.parametrize("drip", [False, True], ids=["huge-line", "drip"])
async def test_a_streamed_answer_past_its_limits_fails_in_one_line(
    serve: Callable[[Handler], Awaitable[str]], drip: bool
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await answer.prepare(request)
        await answer.write(b"data: ")
        while True:  # one line that never ends: fast and large, or slow
            await answer.write(b"x" * (1 if drip else 65536))
            await asyncio.sleep(0.1 if drip else 0)

    url = await serve(handler)
    client = await client_for(url, max_response_bytes=2**20, response_timeout=2, timeout=60)
    with pytest.raises(vf.ModelError) as caught:
        async for _ in client.stream_response(PROMPT, "m", {}):
            pass
    limit = "took longer than 2 s in all" if drip else "is larger than 1048576 bytes"
    assert str(caught.value).startswith(f"the answer of {url}/chat/completions {limit}")


@pytest.mark.parametrize(
    "field", [{"max_response_bytes": 0}, {"max_response_bytes": -1}, {"response_timeout": 0}, {"response_timeout": math.inf}]
)
def test_answer_limits_must_be_positive_and_finite(field: dict[str, Any]) -> None:
    with pytest.raises(vf.ConfigError, match=f"field '{next(iter(field))}'"):
        vf.ClientConfig(**field)
