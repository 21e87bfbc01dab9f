"""The plain pool (`v1.clients._plain_http`): the wire's whole answers from an ``http://`` upstream.

Against real servers on loopback: aiohttp's, for what a well-behaved upstream sees, and scripted
asyncio servers that write exactly the bytes a broken or hostile one would.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
import pytest
from aiohttp import web

import v1 as vf
from tests.clients.conftest import Handler
from tests.tools.patience import HANG_S
from v1.clients import _plain_http, resolve_client
from v1.clients._openai_wire import PLAIN_HTTP_ENV, OpenAIWire, plain_address

PROMPT = [{"role": "user", "content": "hi"}]
ANSWER = {"id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}
ANSWER_BYTES = json.dumps(ANSWER).encode()
BODY = {"model": "m", "messages": PROMPT}

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    """Start a loopback TCP server that runs `script` on each connection; its base URL (``.../v1``)."""
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await script(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield start
    for server in servers:
        server.close()


@pytest.fixture
async def wires() -> AsyncIterator[Callable[..., OpenAIWire]]:
    made: list[OpenAIWire] = []

    def make(url: str, **limits: Any) -> OpenAIWire:
        settings: dict[str, Any] = {"timeout": HANG_S, "connect_timeout": HANG_S, "max_connections": 64, **limits}
        wire = OpenAIWire(url, {"Authorization": "Bearer k", "Content-Type": "application/json"}, **settings)
        made.append(wire)
        return wire

    yield make
    for wire in made:
        await wire.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request as it arrived: its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return head + (await reader.readexactly(int(match.group(1))) if match else b"")


def answer(body: bytes = ANSWER_BYTES, *headers: bytes, status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + b"".join(h + b"\r\n" for h in headers)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def answers_then_waits_for_the_close(closed: asyncio.Event) -> Script:
    """A keep-alive server's side of one call: it answers, then sets `closed` when the client closes the connection."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer())
        assert await reader.read() == b""
        closed.set()

    return script


async def connections_closed(pool: _plain_http.PlainHTTPPool) -> None:
    for _ in range(200):
        if pool.open == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{pool.open} connections still open")


# -- which path a wire takes -------------------------------------------------------------------------------


def test_plain_http_goes_to_the_plain_pool_and_everything_else_to_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy", PLAIN_HTTP_ENV):
        monkeypatch.delenv(name, raising=False)
    assert plain_address("http://127.0.0.1:8000/v1") == ("127.0.0.1", 8000)
    assert plain_address("http://vllm.internal/v1") == ("vllm.internal", 80)
    assert plain_address("http://[::1]:8000/v1") == ("::1", 8000)
    assert plain_address("https://api.openai.com/v1") is None, "TLS stays on aiohttp"
    assert plain_address("http://user:secret@host:8000/v1") is None, "credentials in the URL stay on aiohttp"
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert plain_address("http://vllm.internal/v1") is None, "a proxy from the environment carries the request"
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv(PLAIN_HTTP_ENV, "0")
    assert plain_address("http://127.0.0.1:8000/v1") is None


async def test_the_upstream_sees_the_same_request_from_the_plain_pool_as_from_aiohttp(
    serve: Callable[[Handler], Awaitable[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, dict[str, str], Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.path_qs, {k.lower(): v for k, v in request.headers.items()}, await request.json()))
        return web.json_response(ANSWER)

    url = await serve(handler)
    for plain, wait in (("1", 5.0), ("0", 6.0)):  # configs apart: a config's client is made once
        monkeypatch.setenv(PLAIN_HTTP_ENV, plain)
        config = vf.ClientConfig(api_base_url=url, max_retries=0, extra_headers={"X-Team": "e"}, connect_timeout=wait)
        client = await resolve_client(config)
        try:
            response = await client.get_response(PROMPT, "m", {"temperature": 0.5})
            assert response.message.content == "hello"
            assert (client.wire.plain_pool() is not None) is (plain == "1")
        finally:
            await client.close()
    (plain_path, plain_headers, plain_body), (aio_path, aio_headers, aio_body) = seen
    assert plain_path == aio_path == "/v1/chat/completions"
    assert plain_body == aio_body == {"temperature": 0.5, "model": "m", "messages": PROMPT}
    aio_headers["accept-encoding"] = "gzip, deflate"  # aiohttp adds br where brotli is installed
    assert plain_headers == aio_headers
    assert plain_headers["x-team"] == "e" and plain_headers["host"] == url.removeprefix("http://").removesuffix("/v1")


# -- keep-alive -----------------------------------------------------------------------------------------------


async def test_sequential_calls_share_one_connection_and_concurrent_ones_stay_within_max_connections(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    connections, at_once, most = [0], [0], [0]

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        while not reader.at_eof():
            request = await read_request(reader)
            at_once[0] += 1
            most[0] = max(most[0], at_once[0])
            await asyncio.sleep(0.05)
            at_once[0] -= 1
            writer.write(answer(b'{"n": %d}' % len(request)))

    wire = wires(await scripted(keep_alive), max_connections=2)
    for _ in range(5):
        assert "n" in await wire.post("/chat/completions", BODY)
    assert connections == [1]
    results = await asyncio.gather(*(wire.post("/chat/completions", BODY) for _ in range(8)))
    assert len(results) == 8 and all("n" in result for result in results)
    assert most == [2] and connections == [2]


async def test_an_answer_that_closes_or_sends_more_than_asked_leaves_its_connection(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    connections: list[int] = []

    async def unruly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        await read_request(reader)
        if len(connections) == 1:
            writer.write(answer(ANSWER_BYTES, b"Connection: close"))
        else:
            writer.write(answer() + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")  # an answer nobody asked for
        await writer.drain()
        await reader.read()  # until the client closes

    wire = wires(await scripted(unruly))
    for _ in range(3):
        assert (await wire.post("/chat/completions", BODY))["id"] == "c1"
    assert len(connections) == 3, "neither connection was reused"


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    async def one_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer())
        await writer.drain()  # then the server closes it, as uvicorn does after its keep-alive timeout

    wire = wires(await scripted(one_answer))
    for _ in range(3):
        assert (await wire.post("/chat/completions", BODY))["id"] == "c1"
        await asyncio.sleep(0.05)


async def test_idle_connections_are_closed_after_idle_s(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_plain_http, "IDLE_S", 0.2)
    closed = asyncio.Event()
    wire = wires(await scripted(answers_then_waits_for_the_close(closed)))
    await wire.post("/chat/completions", BODY)
    pool = wire.plain_pool()
    assert pool is not None and pool.open == 1
    await asyncio.wait_for(closed.wait(), HANG_S)
    await connections_closed(pool)


# -- how an answer may be framed --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n"
        + ANSWER_BYTES[:5]
        + b"\r\n"
        + b"%x\r\n" % (len(ANSWER_BYTES) - 5)
        + ANSWER_BYTES[5:]
        + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + answer(),
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER_BYTES,  # ends where the connection does
        answer(gzip.compress(ANSWER_BYTES), b"Content-Encoding: gzip"),
        answer(zlib.compress(ANSWER_BYTES), b"Content-Encoding: deflate"),
        answer(zlib.compress(ANSWER_BYTES)[2:-4], b"Content-Encoding: deflate"),  # raw deflate, as some servers send
    ],
    ids=["chunked", "continue", "until-close", "gzip", "deflate", "raw-deflate"],
)
async def test_every_framing_of_an_answer_is_read_whole(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire], raw: bytes
) -> None:
    async def framed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for start in range(0, len(raw), 7):  # in pieces, so no part of the parse sees a whole line at once
            writer.write(raw[start : start + 7])
            await writer.drain()
        if b"HTTP/1.0" in raw[:8]:
            writer.close()

    wire = wires(await scripted(framed))
    assert await wire.post("/chat/completions", BODY) == ANSWER


# -- a broken or hostile upstream: one line, the connection closed ----------------------------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"SMTP 220 hello\r\n\r\n", "is not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * 70_000 + b"\r\n\r\n", "headers are larger than 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 70_000, "headers are larger than 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + ANSWER_BYTES, "closed the connection before its answer ended"),
        (answer(ANSWER_BYTES, b"Content-Encoding: br"), "encoded as 'br', which was not asked for"),
        (answer(b"not gzip at all", b"Content-Encoding: gzip"), "does not decode as 'gzip'"),
    ],
    ids=["not-http", "huge-headers", "endless-header", "short-body", "unasked-encoding", "bad-gzip"],
)
async def test_a_broken_answer_fails_the_call_in_one_line(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire], raw: bytes, says: str
) -> None:
    """Each fails the call with the reason; one whose framing broke also closes its connection (a body that does not
    decode came whole, so its connection is still sound)."""

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()
        if b"Content-Length: 500" in raw:
            writer.close()
            return
        await reader.read()

    wire = wires(await scripted(broken))
    with pytest.raises(openai.APIConnectionError) as caught:
        await wire.post("/chat/completions", BODY)
    message = str(caught.value)
    assert "UpstreamProtocolError" in message and says in message and "\n" not in message
    pool = wire.plain_pool()
    assert pool is not None
    if "encod" not in says and "decode" not in says:
        await connections_closed(pool)


async def test_an_upstream_that_goes_quiet_times_out_and_one_that_is_slow_in_all_is_too_slow(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        await reader.read()

    with pytest.raises(openai.APITimeoutError):
        await wires(await scripted(quiet), timeout=0.3).post("/chat/completions", BODY)

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        while True:  # each byte well within the read timeout
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.05)

    wire = wires(await scripted(drip), timeout=0.5, response_timeout=0.6)
    with pytest.raises(vf.ModelError, match=r"took longer than 0.6 s in all \(ClientConfig.response_timeout\)$"):
        await wire.post("/chat/completions", BODY)


async def test_an_answer_larger_than_the_limit_is_refused_as_it_arrives(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    sent = [0]

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"10000\r\n" + b"z" * 0x10000 + b"\r\n")
            await writer.drain()
            sent[0] += 0x10000

    wire = wires(await scripted(endless), max_response_bytes=2**20)
    with pytest.raises(vf.ModelError, match=r"is larger than 1048576 bytes \(ClientConfig.max_response_bytes\)$"):
        await wire.post("/chat/completions", BODY)
    assert sent[0] < 64 * 2**20, "the rest of the answer was never read"


async def test_a_call_cancelled_mid_answer_closes_its_connection_and_the_next_call_gets_a_new_one(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    started, connections = asyncio.Event(), [0]

    async def half_then_whole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        await read_request(reader)
        if connections[0] == 1:
            writer.write(answer()[:-10])  # the rest never comes
            started.set()
            await reader.read()
            return
        writer.write(answer())
        await reader.read()

    wire = wires(await scripted(half_then_whole))
    call = asyncio.create_task(wire.post("/chat/completions", BODY))
    await asyncio.wait_for(started.wait(), HANG_S)
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    pool = wire.plain_pool()
    assert pool is not None
    await connections_closed(pool)
    assert (await wire.post("/chat/completions", BODY))["id"] == "c1"
    assert connections == [2]


@pytest.mark.parametrize("value", ["7\r\nX-Injected: 1", "7\nX-Injected: 1", "7\x00"])
async def test_a_header_from_a_row_that_would_smuggle_another_is_refused_unsent(
    scripted: Callable[[Script], Awaitable[str]], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    requests: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await read_request(reader))
        writer.write(answer())
        await reader.read()

    url = await scripted(record)
    for plain in ("1", "0"):
        monkeypatch.setenv(PLAIN_HTTP_ENV, plain)
        client = vf.ClientConfig(api_base_url=url, max_retries=3, extra_headers_from_state={"X-Session-ID": "example_id"})
        state = await vf.Harness(client=client, model="m").run({"prompt": "hi", "example_id": value})
        error = state["error"]
        assert error is not None and error["type"] == "ModelError", error
        assert error["message"] == (
            f"the request to {url}/chat/completions was not sent: "
            "the value of the HTTP header 'X-Session-ID' holds a line break or NUL"
        )
        assert "model_retries" not in state, "not retried: the same row would send it again"
    assert requests == []


async def test_closing_the_wire_closes_its_idle_connections(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    closed = asyncio.Event()
    wire = wires(await scripted(answers_then_waits_for_the_close(closed)))
    await wire.post("/chat/completions", BODY)
    await wire.close()
    await asyncio.wait_for(closed.wait(), HANG_S)


async def test_a_connection_opened_just_as_its_call_is_cancelled_is_kept_for_the_next_call(
    scripted: Callable[[Script], Awaitable[str]], wires: Callable[..., OpenAIWire]
) -> None:
    """A connection is opened in a task of its own (its context is no rollout's); a caller cancelled after that task
    finished but before the caller resumed must leave the connection in the pool, counted once, not leak it."""
    connections = [0]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections[0] += 1
        while True:
            await read_request(reader)
            writer.write(answer())

    wire = wires(await scripted(serve))
    loop = asyncio.get_running_loop()
    cancelled_calls: list[asyncio.Task[Any]] = []

    def cancel_the_caller_once_open(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        if getattr(coro, "__qualname__", "") == "PlainHTTPPool._open":  # before its caller waits on it
            caller = asyncio.current_task()
            assert caller is not None
            task.add_done_callback(lambda _: caller.cancel())
            cancelled_calls.append(caller)
        return task

    loop.set_task_factory(cancel_the_caller_once_open)
    call = asyncio.create_task(wire.post("/chat/completions", BODY))
    with pytest.raises(asyncio.CancelledError):
        await call
    loop.set_task_factory(None)
    assert cancelled_calls == [call]
    pool = wire.plain_pool()
    assert pool is not None and pool.open == 1
    assert (await wire.post("/chat/completions", BODY))["id"] == "c1"
    assert connections == [1] and pool.open == 1  # the next call took the connection opened for the cancelled one
