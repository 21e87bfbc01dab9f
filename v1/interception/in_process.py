"""The in-process transport: SDK calls of in-process programs enter the endpoint's handler without a socket.

`state.get_client()` hands in-process programs (the default tool loop, Python
callables) an SDK client whose HTTP pool carries requests for the endpoint's own
origin straight into `EndpointServer.dispatch`, the handler the aiohttp server
runs: the same authorization, parsing, recording, errors and streaming, minus
the loopback socket, aiohttp's request parsing and the program-side connection
pool. Requests for any other origin, and bodies with a `Content-Encoding`, go
over the network as before. The transport holds the endpoint's origin only: it
finds the running server in a registry here, so nothing a program holds leads
to the server or its sessions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

from v1.clients.http import http_library
from v1.interception.exchange import JSON_CONTENT_TYPE, Answer, BodyTooLarge

Dispatch = Callable[[Any], Coroutine[Any, Any, Answer | None]]

_DISPATCHERS: dict[tuple[str, str, int], Dispatch] = {}
_END = object()
_SERVER_ERROR = b"500 Internal Server Error\n\nServer got itself in trouble"


def register(host: str, port: int, dispatch: Dispatch) -> None:
    """Route in-process requests for ``http://host:port`` to `dispatch` (the endpoint server, when it starts)."""
    _DISPATCHERS[("http", host, port)] = dispatch


def unregister(host: str, port: int) -> None:
    """Forget the endpoint at ``http://host:port`` (when it closes): later requests go over the network."""
    _DISPATCHERS.pop(("http", host, port), None)


class _InProcessExchange:
    """One request carried in process; implements `v1.interception.exchange.Exchange`."""

    __slots__ = ("_body", "_max_body_bytes", "chunks", "gone", "headers", "method", "path", "ready", "stream_headers")

    def __init__(self, method: str, path: str, headers: Any, body: bytes, max_body_bytes: int, ready: asyncio.Future[None]):
        self.method = method
        self.path = path
        self.headers = headers
        self._body = body
        self._max_body_bytes = max_body_bytes
        self.ready = ready
        self.stream_headers: Mapping[str, str] | None = None
        self.chunks: asyncio.Queue[Any] = asyncio.Queue()
        self.gone = False

    async def read(self) -> bytes:
        if len(self._body) > self._max_body_bytes:
            raise BodyTooLarge
        return self._body

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        self.stream_headers = headers
        if not self.ready.done():
            self.ready.set_result(None)

    async def write(self, data: bytes) -> None:
        if self.gone:
            raise ConnectionResetError("the program closed the stream")
        self.chunks.put_nowait(data)

    async def write_eof(self) -> None:
        self.chunks.put_nowait(_END)


@functools.cache
def _chunks_class() -> type[Any]:
    """The stream class of streamed answers: an `AsyncByteStream` of the SDK's HTTP library, built on first use."""

    class Chunks(http_library().AsyncByteStream):  # type: ignore[misc,name-defined]
        """The body of a streamed answer, chunk by chunk as the handler writes them."""

        def __init__(self, exchange: _InProcessExchange, handler: asyncio.Task[Any]) -> None:
            self._exchange = exchange
            self._handler = handler

        async def __aiter__(self) -> AsyncIterator[bytes]:
            chunks = self._exchange.chunks
            while True:
                chunk = await chunks.get()
                if chunk is _END:
                    if self._handler.done() and not self._handler.cancelled() and self._handler.exception() is not None:
                        raise http_library().RemoteProtocolError("the endpoint failed mid-stream")
                    return
                yield chunk

        async def aclose(self) -> None:
            self._exchange.gone = True

    return Chunks


class InProcessTransport:
    """Carries requests for the endpoint's origin into its handler; others go to `fallback`.

    An `AsyncBaseTransport` of the SDK's HTTP library by its methods (the library is imported only when used).
    """

    def __init__(self, host: str, port: int, max_body_bytes: int, fallback: Any) -> None:
        self._origin = ("http", host, port)
        self._max_body_bytes = max_body_bytes
        self._fallback = fallback
        self._handlers: set[asyncio.Task[Any]] = set()

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        dispatch = _DISPATCHERS.get((url.scheme, url.host, url.port))
        if dispatch is None or (url.scheme, url.host, url.port) != self._origin or "content-encoding" in request.headers:
            return await self._fallback.handle_async_request(request)
        body = await request.aread()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        exchange = _InProcessExchange(request.method, url.path, request.headers, body, self._max_body_bytes, ready)
        # The handler runs as a task of its own, as under a server: a program that stops waiting
        # (a timeout, a closed stream) does not cancel the call the endpoint is answering.
        handler: asyncio.Task[Answer | None] = loop.create_task(dispatch(exchange))
        self._handlers.add(handler)
        handler.add_done_callback(lambda task: self._finished(task, exchange))
        await ready
        if exchange.stream_headers is not None:
            return http_library().Response(200, headers=dict(exchange.stream_headers), stream=_chunks_class()(exchange, handler))
        if handler.cancelled() or handler.exception() is not None:
            return http_library().Response(500, headers={"content-type": "text/plain; charset=utf-8"}, content=_SERVER_ERROR)
        answer = handler.result()
        assert answer is not None, "a handler that did not stream answers"
        headers = {"content-type": JSON_CONTENT_TYPE, **(answer.headers or {})}
        return http_library().Response(answer.status, headers=headers, content=answer.text.encode())

    def _finished(self, task: asyncio.Task[Any], exchange: _InProcessExchange) -> None:
        self._handlers.discard(task)
        if not exchange.ready.done():
            exchange.ready.set_result(None)
        elif exchange.stream_headers is not None:
            exchange.chunks.put_nowait(_END)  # after a failure mid-stream; a second end is never read
        if not task.cancelled():
            task.exception()  # retrieved: reported as a 500 or a broken stream

    async def aclose(self) -> None:
        return None  # the fallback is the loop's shared pool, closed with the loop scope

    async def __aenter__(self) -> InProcessTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


__all__ = ["InProcessTransport", "register", "unregister"]
