"""A scriptable model server over real HTTP speaking every dialect v1's clients use, for tests and benchmarks.

Routes (under ``/v1``): ``chat/completions``, ``chat/completions/tokens`` (the
vLLM-style token route: token ids always returned), ``completions``,
``responses`` (OpenAI Responses) and ``messages`` (Anthropic Messages), each
streaming in its own event format too. Every request is seen by responders as
chat messages (`MockRequest.messages`), whatever its dialect. ``GET /mock/stats``
answers how many model requests it has received, how many are being answered
now and the most at once (`in_flight`, `peak_in_flight`): what a benchmark
reads to see how many rollouts were really waiting on the model together.

    with MockModelServer(lambda request: Reply.text(request.last_user_text[::-1])) as server:
        client = ClientConfig(api_base_url=server.url)

Replies come from, in order: replies queued with `script(...)`, then the
`responder` (a string, a `Reply`, or a function of the `MockRequest`, sync or
async). The server runs on its own thread and event loop, so it serves sync
and async callers alike; `python -m v1.testing` runs it as a process.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, Union

from aiohttp import web

from v1.interception import BadRequest
from v1.registry import DIALECTS
from v1.types import Response, ResponseMessage, ResponseTokens, ToolCall, Usage

Fault = Literal["reset", "malformed_json", "truncated_stream", "not_sse"]
"""How a reply fails besides an error status: the connection reset before any byte; a 200 whose JSON body is
cut short; a stream cut off before its terminal event (for a request that did not stream: a cut JSON body); a
whole JSON body answering a streaming request."""

VOCAB_SIZE = 32000
STOP_GRACE_S = 1.0
"""How long `stop()` lets requests in flight finish."""
LISTEN_BACKLOG = 4096  # like the endpoint's: hundreds of concurrent connects must not overflow the queue
DIALECT_PATHS = (
    ("/chat/completions/tokens", "chat_completions_token"),
    ("/chat/completions", "chat_completions"),
    ("/completions", "completions"),
    ("/responses", "responses"),
    ("/messages", "messages"),
)


def mock_token_ids(text: str) -> list[int]:
    """Deterministic token ids: one per whitespace-separated word (CRC32 into a 32k vocabulary)."""
    return [zlib.crc32(word.encode()) % VOCAB_SIZE for word in text.split()] or [0]


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        parts.append(f"{message.get('role')}: {content or ''}")
    return "\n".join(parts)


@dataclass
class MockRequest:
    """What the mock server received.

    `messages` are OpenAI chat messages whatever the dialect (a Completions
    prompt is one user message); `body` is the raw request.
    """

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    query: str = ""
    """The request's query string (empty when it had none)."""
    canonical_messages: list[dict[str, Any]] | None = None
    canonical_tools: list[dict[str, Any]] | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        if self.canonical_messages is not None:
            return list(self.canonical_messages)
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """Tools in Chat Completions form (`{"type": "function", "function": {...}}`) whatever the dialect."""
        if self.canonical_tools is not None:
            return list(self.canonical_tools)
        return list(self.body.get("tools") or [])

    @property
    def dialect(self) -> str:
        """`chat_completions`, `chat_completions_token`, `completions`, `responses` or `messages`."""
        for suffix, name in DIALECT_PATHS:
            if self.path.endswith(suffix):
                return name
        return "chat_completions"

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
                return str(content or "")
        return ""

    @property
    def last_message(self) -> dict[str, Any]:
        return self.messages[-1] if self.messages else {}


@dataclass
class Reply:
    """One scripted answer: text, tool calls, or a failure, optionally after a delay."""

    content: str | None = None
    _: KW_ONLY
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning_content: str | None = None
    reasoning_signature: str | None = None
    """The thinking block's signature, in dialects that have one (Anthropic Messages)."""
    finish_reason: str | None = None
    delay: float = 0.0
    status: int = 200
    error: str | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int | None = None
    """The usage's `prompt_tokens`, whatever the prompt's length (default: one per word of the prompt)."""
    stream_delay: float = 0.0
    """Seconds between streamed chunks (a slow generation, for streaming tests)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers (`Retry-After`, say)."""
    fault: Fault | None = None
    """A failure other than an error status (see `Fault`)."""

    @classmethod
    def text(cls, content: str, **kwargs: Any) -> Reply:
        return cls(content=content, **kwargs)

    @classmethod
    def tool(
        cls, name: str, arguments: Mapping[str, Any] | str | None = None, *, content: str | None = None, **kwargs: Any
    ) -> Reply:
        """A reply calling one tool; chain more with `.and_tool(...)`."""
        return cls(content=content, **kwargs).and_tool(name, arguments)

    def and_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> Reply:
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        self.tool_calls.append(
            {"id": f"call_{len(self.tool_calls)}_{zlib.crc32((name + args).encode()):08x}", "name": name, "arguments": args}
        )
        return self

    @classmethod
    def fail(cls, status: int = 500, message: str = "mock failure", *, retry_after: float | None = None, **kwargs: Any) -> Reply:
        """An error status in the dialect's error shape; `retry_after` adds a `Retry-After` header (seconds)."""
        if retry_after is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Retry-After": f"{retry_after:g}"}
        return cls(status=status, error=message, **kwargs)

    @classmethod
    def hang(cls, seconds: float = 3600.0) -> Reply:
        """No answer for `seconds` (past a client's timeout), then an empty text."""
        return cls(content="", delay=seconds)

    @classmethod
    def failing(cls, fault: Fault, content: str = "cut short", **kwargs: Any) -> Reply:
        """A reply that fails in transport or shape rather than by status (see `Fault`)."""
        return cls(content=content, fault=fault, **kwargs)


Responder = Union[str, Reply, Callable[[MockRequest], Union[Reply, str, Awaitable[Union[Reply, str]]]]]


def echo(request: MockRequest) -> Reply:
    """Answer with the last user message."""
    return Reply.text(request.last_user_text)


class MockModelServer:
    """A real HTTP server speaking OpenAI Chat Completions (streaming too), with scripted replies.

    Args:
        responder: the default reply (see the module docs); `echo` when omitted.
        model: the model name it reports.
        host, port: where to listen; port 0 picks a free one.
        keep_requests: keep every request in `requests` (for a test to read); False counts them only, as
            the command-line server does (a load test of hours would otherwise keep them all, and the
            collector's full passes over them grow into pauses of the whole server).
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        model: str = "mock-model",
        host: str = "127.0.0.1",
        port: int = 0,
        keep_requests: bool = True,
    ) -> None:
        self.responder: Responder = responder if responder is not None else echo
        self.model = model
        self.host = host
        self.port = port
        self.requests: list[MockRequest] = []
        """The requests received (with `keep_requests`; else always empty)."""
        self.keep_requests = keep_requests
        self.received = 0
        """How many model requests it has received (since the last `reset`)."""
        self._script: deque[Reply | str] = deque()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._lock = threading.Lock()
        self._long_pauses: set[asyncio.Task[Any]] = set()
        """Handlers waiting out a `delay` that ends past `STOP_GRACE_S`: `stop()` cancels them instead of waiting."""
        self.in_flight = 0
        """Model requests (POSTs) being answered now."""
        self.peak_in_flight = 0
        """The most model requests that were being answered at once."""

    @property
    def url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def script(self, *replies: Reply | str) -> MockModelServer:
        """Queue replies to give, in order, before falling back to the responder."""
        with self._lock:
            self._script.extend(replies)
        return self

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.received = 0
            self.peak_in_flight = self.in_flight

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> MockModelServer:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start_app())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=serve, name="v1-mock-model-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    async def _start_app(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._count_in_flight])
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/chat/completions/tokens", self._chat_completions)
        for path in ("/v1/completions", "/v1/responses", "/v1/messages"):
            app.router.add_post(path, self._other_dialect)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/mock/stats", self._stats)
        # stopping does not wait for a reply scripted to hang
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=LISTEN_BACKLOG)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._stop_serving)
        self._thread.join(timeout=10)
        self._thread = None

    def _stop_serving(self) -> None:
        # a reply scripted to hang past the grace would only be cut when the grace ran out: cut it now
        for task in self._long_pauses:
            task.cancel()
        assert self._loop is not None
        self._loop.stop()

    def __enter__(self) -> MockModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> MockModelServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # -- serving ------------------------------------------------------------------------------

    async def _record_and_take_reply(self, request: MockRequest) -> Reply:
        """Record `request` and take the next scripted reply (else the responder's), after that reply's `delay`."""
        with self._lock:
            self.received += 1
            if self.keep_requests:
                self.requests.append(request)
            scripted = self._script.popleft() if self._script else None
        source: Any = scripted if scripted is not None else self.responder
        if callable(source) and not isinstance(source, Reply):
            source = source(request)
            if inspect.isawaitable(source):
                source = await source
        reply = Reply.text(source) if isinstance(source, str) else source
        if reply.delay:
            await self._pause(reply.delay)
        return reply

    async def _pause(self, seconds: float) -> None:
        task = asyncio.current_task()
        if task is None or seconds <= STOP_GRACE_S:
            await asyncio.sleep(seconds)
            return
        self._long_pauses.add(task)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._long_pauses.discard(task)

    @web.middleware
    async def _count_in_flight(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)  # type: ignore[no-any-return]
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self.in_flight -= 1

    async def _stats(self, request: web.Request) -> web.Response:
        with self._lock:
            received = self.received
        return web.json_response({"requests": received, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "mock"}]}
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "invalid JSON", "type": "invalid_request_error"}}, status=400)
        if request.path.endswith("/tokens"):
            body = {**body, "return_token_ids": True}
        received = MockRequest(path=request.path, body=body, headers=dict(request.headers), query=request.query_string)
        reply = await self._record_and_take_reply(received)
        if reply.error is not None or reply.status != 200:
            return self._error(reply, DIALECTS.get("chat_completions"))
        completion = self._completion(received, reply)
        failed = await self._fault(request, reply, completion, bool(body.get("stream")))
        if failed is not None:
            return failed
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, completion, include_usage, reply.stream_delay, reply.fault == "truncated_stream")
        return web.json_response(completion)

    @staticmethod
    def _error(reply: Reply, dialect: Any) -> web.Response:
        kind = "invalid_request_error" if reply.status < 500 else "server_error"
        body = dialect.error_body(reply.status, reply.error or "error", kind, None, None)
        return web.json_response(body, status=reply.status, headers=reply.headers)

    @staticmethod
    async def _fault(request: web.Request, reply: Reply, whole: Any, streaming: bool) -> web.StreamResponse | None:
        """The failing answer `reply.fault` asks for (`whole`: the answer's JSON body), or None to answer normally."""
        if reply.fault == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise ConnectionResetError("mock: connection reset on purpose")
        if reply.fault == "malformed_json" or (reply.fault == "truncated_stream" and not streaming):
            text = json.dumps(whole)
            return web.Response(text=text[: len(text) // 2], content_type="application/json", headers=reply.headers)
        if reply.fault == "not_sse":
            return web.json_response(whole, headers=reply.headers)
        return None

    async def _other_dialect(self, request: web.Request) -> web.StreamResponse:
        name = request.path.rsplit("/", 1)[-1]
        dialect = DIALECTS.get(name)
        try:
            body = await request.json()
            parsed = dialect.parse_request(body)
        except (ValueError, BadRequest) as exc:
            return web.json_response(
                dialect.error_body(400, f"mock: bad request: {exc}", "invalid_request_error", None, None), status=400
            )
        prompt = parsed.messages
        canonical = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        tools = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in parsed.tools or ()
        ]
        received = MockRequest(
            path=request.path,
            body=body,
            headers=dict(request.headers),
            query=request.query_string,
            canonical_messages=canonical,
            canonical_tools=tools,
        )
        reply = await self._record_and_take_reply(received)
        if reply.error is not None or reply.status != 200:
            return self._error(reply, dialect)
        response = self._response(received, reply, want_tokens=name == "completions")
        if name == "responses":
            parsed.extra["response_id"] = f"resp_mock_{next(self._ids)}"
        model = body.get("model") or self.model
        failed = await self._fault(request, reply, dialect.render(response, model, parsed), parsed.stream)
        if failed is not None:
            return failed
        if not parsed.stream:
            return web.json_response(dialect.render(response, model, parsed))
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        frames = list(dialect.render_stream(response, model, parsed))
        if reply.fault == "truncated_stream":  # cut before the terminal events
            frames = frames[: max(1, len(frames) // 2)]
        for frame in frames:
            await stream.write(frame)
            if reply.stream_delay:
                await asyncio.sleep(reply.stream_delay)
        await stream.write_eof()
        return stream

    def _response(self, request: MockRequest, reply: Reply, *, want_tokens: bool) -> Any:
        completion = self._completion(request, reply)
        choice = completion["choices"][0]
        usage = completion["usage"]
        tokens = None
        body = request.body
        if want_tokens and (body.get("return_token_ids") or body.get("logprobs") is not None):
            ids = choice.get("token_ids") or reply.completion_ids or mock_token_ids(reply.content or "")
            logprobs = reply.logprobs or [-0.01 * (i + 1) for i in range(len(ids))]
            prompt_ids = completion.get("prompt_token_ids") or mock_token_ids(_prompt_text(request.messages))
            tokens = ResponseTokens(
                prompt_ids=prompt_ids,
                prompt_mask=[0] * len(prompt_ids),
                completion_ids=ids,
                completion_mask=[1] * len(ids),
                completion_logprobs=logprobs,
            )
        return Response(
            id=completion["id"],
            created=completion["created"],
            model=completion["model"],
            usage=Usage(
                prompt_tokens=usage["prompt_tokens"],
                completion_tokens=usage["completion_tokens"],
                total_tokens=usage["total_tokens"],
            ),
            message=ResponseMessage(
                content=reply.content,
                reasoning_content=reply.reasoning_content,
                reasoning_signature=reply.reasoning_signature,
                finish_reason=choice["finish_reason"] if choice["finish_reason"] in ("stop", "length", "tool_calls") else "stop",
                tool_calls=[ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in reply.tool_calls] or None,
                tokens=tokens,
            ),
        )

    def _completion(self, request: MockRequest, reply: Reply) -> dict[str, Any]:
        prompt_ids = mock_token_ids(_prompt_text(request.messages))
        prompt_tokens = len(prompt_ids) if reply.prompt_tokens is None else reply.prompt_tokens
        completion_ids = reply.completion_ids or mock_token_ids(
            reply.content or " ".join(c["arguments"] for c in reply.tool_calls)
        )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning_content is not None:
            message["reasoning_content"] = reply.reasoning_content
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in reply.tool_calls
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
            "logprobs": None,
        }
        body = request.body
        completion: dict[str, Any] = {
            "id": f"chatcmpl-mock-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(completion_ids),
                "total_tokens": prompt_tokens + len(completion_ids),
            },
        }
        if body.get("logprobs"):
            logprobs = reply.logprobs or [-0.01 * (i + 1) for i in range(len(completion_ids))]
            choice["logprobs"] = {
                "content": [
                    {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(completion_ids, logprobs)
                ]
            }
        if body.get("return_token_ids"):
            completion["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
        return completion

    async def _stream(
        self, request: web.Request, completion: dict[str, Any], include_usage: bool, delay: float = 0.0, truncate: bool = False
    ) -> web.StreamResponse:
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        choice = completion["choices"][0]
        message = choice["message"]

        async def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}
            if "prompt_token_ids" in extra:
                chunk["prompt_token_ids"] = chunk["choices"][0].pop("prompt_token_ids")
            await stream.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if delay:
                await asyncio.sleep(delay)

        first = {"prompt_token_ids": completion["prompt_token_ids"]} if "prompt_token_ids" in completion else {}
        await send({"role": "assistant", "content": ""}, **first)
        if message.get("reasoning_content"):
            await send({"reasoning_content": message["reasoning_content"]})
        for piece in re.findall(r"\s*\S+\s*", message.get("content") or "") or (
            [message["content"]] if message.get("content") else []
        ):
            await send({"content": piece})
        for index, call in enumerate(message.get("tool_calls") or []):
            await send(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": call["function"]["arguments"]},
                        }
                    ]
                }
            )
        if truncate:  # cut off before the finish reason and [DONE]
            await stream.write_eof()
            return stream
        last = {k: choice[k] for k in ("token_ids", "logprobs") if choice.get(k) is not None}
        await send({}, choice["finish_reason"], **last)
        if include_usage:
            await stream.write(f"data: {json.dumps({**base, 'choices': [], 'usage': completion['usage']})}\n\n".encode())
        await stream.write(b"data: [DONE]\n\n")
        await stream.write_eof()
        return stream


__all__ = ["Fault", "MockModelServer", "MockRequest", "Reply", "Responder", "echo", "mock_token_ids"]
