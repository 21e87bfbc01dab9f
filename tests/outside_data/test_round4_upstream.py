"""An upstream's answer is outside data for every client v1 builds from a `ClientConfig`, not only Chat Completions.

The Responses and Anthropic Messages clients read through the official SDKs. A hostile upstream on
loopback sends a huge whole answer, an endless stream, or drips a byte at a time: each call ends in
one `ModelError` naming the limit, after reading a bounded number of bytes, and is not retried.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import resolve_client

LIMIT = 2**20
HUGE = 48 * 2**20
"""What the upstream sends at most (a bounded reader stops near `LIMIT`; an unbounded one reads it all)."""
SLACK = 8 * 2**20
"""Socket buffers on both sides of loopback: bytes the server may write that the client never read."""

DRIP = 200
"""Bytes the dripping upstream sends, one each 50 ms (10 s: five times `response_timeout`)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CLIENT_TYPES = {"openai_responses": "/responses", "anthropic_messages": "/messages"}


class Upstream:
    """A loopback server whose answers misbehave; it counts the requests and the body bytes it wrote."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.written = 0
        self.done = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        stream = (await request.json()).get("stream")
        answer = web.StreamResponse(headers={"Content-Type": "text/event-stream" if stream else "application/json"})
        await answer.prepare(request)
        try:
            if self.mode == "drip":
                while self.written < DRIP:  # a byte well within the read timeout, far past response_timeout
                    await self._write(answer, b"data: {}\n\n"[self.written % 10 : self.written % 10 + 1])
                    await asyncio.sleep(0.05)
            elif stream:  # an endless stream of events that are each fine
                event = {"type": "ping", "padding": "p" * 60000}
                while self.written < HUGE:
                    await self._write(answer, f"event: ping\ndata: {json.dumps(event)}\n\n".encode())
            else:  # one whole answer, far larger than the limit
                await self._write(answer, b'{"padding": "')
                while self.written < HUGE:
                    await self._write(answer, b"z" * 65536)
                await self._write(answer, b'"}')
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self.done.set()
        return answer

    async def _write(self, answer: web.StreamResponse, data: bytes) -> None:
        await answer.write(data)
        self.written += len(data)


@pytest.fixture
async def upstream(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Upstream, str]]:
    server = Upstream(request.param)
    runner = await _start(server.handle)
    yield server, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()


async def _call(client: Any, streamed: bool) -> None:
    prompt = [{"role": "user", "content": "hi"}]
    if streamed:
        async for _ in client.stream_response(prompt, "m", {"max_tokens": 8}):
            pass
    else:
        await client.get_response(prompt, "m", {"max_tokens": 8})


@pytest.mark.parametrize("client_type", sorted(CLIENT_TYPES))
@pytest.mark.parametrize(
    ("upstream", "streamed"),
    [("huge", False), ("huge", True), ("drip", False), ("drip", True)],
    ids=["whole-huge", "endless-stream", "whole-drip", "stream-drip"],
    indirect=["upstream"],
)
async def test_a_hostile_answer_ends_the_call_in_one_line_after_bounded_reading(
    upstream: tuple[Upstream, str], client_type: str, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, url = upstream
    monkeypatch.setenv("UPSTREAM_KEY", "sk-test")
    config = vf.ClientConfig(
        client_type=client_type,
        api_base_url=url,
        api_key_var="UPSTREAM_KEY",
        max_retries=2,
        # one limit at a time, the other far away: a loaded machine reads 1 MiB slowly
        max_response_bytes=LIMIT if server.mode == "huge" else HUGE,
        response_timeout=2 if server.mode == "drip" else HANG_S,
        timeout=60,
    )
    client = await resolve_client(config)
    try:
        async with asyncio.timeout(HANG_S):
            with pytest.raises(vf.ModelError) as caught:
                await _call(client, streamed)
            await server.done.wait()
    finally:
        await client.close()
    limit = (
        "took longer than 2 s in all (ClientConfig.response_timeout)"
        if server.mode == "drip"
        else f"is larger than {LIMIT} bytes (ClientConfig.max_response_bytes)"
    )
    where = url.removesuffix("/v1") + "/v1" + CLIENT_TYPES[client_type]
    assert str(caught.value) == f"the answer of {where} {limit}"
    assert server.written < LIMIT + SLACK, f"the client read {server.written} bytes"
    assert server.requests == 1  # not retried: the same server would do it again


async def test_the_sdk_clients_still_answer_within_their_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is a bound, not a break: a Responses and a Messages answer within the limits are read as before."""
    from v1.testing import MockModelServer

    monkeypatch.setenv("UPSTREAM_KEY", "sk-test")
    async with MockModelServer(lambda request: "hello") as mock:
        for client_type in CLIENT_TYPES:
            config = vf.ClientConfig(
                client_type=client_type, api_base_url=mock.url, api_key_var="UPSTREAM_KEY", max_response_bytes=2**16
            )
            client = await resolve_client(config)
            try:
                whole = await client.get_response([{"role": "user", "content": "hi"}], "m", {})
                streamed = [event async for event in client.stream_response([{"role": "user", "content": "hi"}], "m", {})]
            finally:
                await client.close()
            assert whole.message.content == "hello", client_type
            assert isinstance(streamed[-1], vf.Response) and streamed[-1].message.content == "hello", client_type


@pytest.mark.parametrize("client_type", sorted(CLIENT_TYPES))
async def test_an_upstream_redirect_never_carries_the_key_or_the_prompt_elsewhere(
    client_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 307 from the upstream to another origin: the SDK would resend the prompt there, with `x-api-key`
    (httpx strips only `Authorization` across origins). A config-built client follows no redirect."""
    elsewhere: list[dict[str, str]] = []

    async def collect(request: web.Request) -> web.Response:
        elsewhere.append(dict(request.headers))
        return web.json_response({})

    thief = await _start(collect)

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": f"http://127.0.0.1:{thief.addresses[0][1]}/steal"})

    upstream = await _start(redirect)
    runners = [thief, upstream]
    monkeypatch.setenv("UPSTREAM_KEY", "sk-secret")
    url = f"http://127.0.0.1:{runners[1].addresses[0][1]}/v1"
    client = await resolve_client(
        vf.ClientConfig(client_type=client_type, api_base_url=url, api_key_var="UPSTREAM_KEY", max_retries=0)
    )
    try:
        with pytest.raises(vf.ModelError):
            await client.get_response([{"role": "user", "content": "the secret prompt"}], "m", {})
    finally:
        await client.close()
        for runner in runners:
            await runner.cleanup()
    assert elsewhere == []


async def _start(handler: Handler) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner
