"""The endpoint served in process: SDK calls and model calls of in-process programs enter its handler without a socket.

`EndpointApp` is the endpoint's app for the one in-process carrier (`v1.clients`):
the endpoint serves its origin with it when it starts, and requests that programs of this
process send through an `InProcessTransport` (the SDK clients `state.get_client()` returns,
the base loop's model calls) enter `EndpointServer.dispatch`, the handler the aiohttp server
runs: the same authorization, parsing, recording, errors and streaming, minus the loopback
socket, aiohttp's request parsing and the program-side connection pool.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from typing import Any

from v1.clients import http_library, whole_response
from v1.interception._exchange import JSON_CONTENT_TYPE, Answer, BodyTooLarge

logger = logging.getLogger(__name__)

Dispatch = Callable[[Any], Coroutine[Any, Any, Answer | None]]
WholeTuple = tuple[int, Mapping[str, str], bytes, Any]
"""A whole answer as the carrier takes it (`v1.clients` reads it as its `WholeAnswer`): status, headers, body, value."""
AnswerOwn = Callable[[str, str, str, bytes, Any], Coroutine[Any, Any, Answer | None]]
_HANDLERS: set[asyncio.Task[Any]] = set()  # handlers running, kept referenced until they finish
_END = object()
_SERVER_ERROR = b"500 Internal Server Error\n\nServer got itself in trouble"


def _start(
    endpoint: EndpointApp, method: str, path: str, headers: Any, body: bytes
) -> tuple[_InProcessExchange, asyncio.Task[Any]]:
    """Start the handler on an SDK client's request, as a task of its own, as under a server: a client that
    stops waiting (its timeout, a closed stream) does not cancel the call the endpoint is answering, so
    the retry it sends next joins that call (`RolloutSession.complete`) instead of starting another."""
    loop = asyncio.get_running_loop()
    exchange = _InProcessExchange(method, path, headers, body, endpoint.max_body_bytes, loop.create_future())
    handler: asyncio.Task[Answer | None] = loop.create_task(endpoint.dispatch(exchange))
    _HANDLERS.add(handler)
    handler.add_done_callback(lambda task: _finished(task, exchange))
    return exchange, handler


def _finished(task: asyncio.Task[Any], exchange: _InProcessExchange) -> None:
    _HANDLERS.discard(task)
    assert exchange.ready is not None, "a handler of its own announces its answer"
    if not exchange.ready.done():
        exchange.ready.set_result(None)
    elif exchange.stream_headers is not None:
        exchange.chunks.put_nowait(_END)  # after a failure mid-stream; a second end is never read
    if not task.cancelled():
        task.exception()  # retrieved: reported as a 500 or a broken stream


def _server_error() -> tuple[int, dict[str, str], bytes]:
    return 500, {"content-type": "text/plain; charset=utf-8"}, _SERVER_ERROR


def _whole_answer(handler: asyncio.Task[Any]) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of a handler that answered without streaming (a 500 if it failed)."""
    if handler.cancelled() or handler.exception() is not None:
        return _server_error()
    answer = handler.result()
    assert answer is not None, "a handler that did not stream answers"
    return answer.status, {"content-type": JSON_CONTENT_TYPE, **(answer.headers or {})}, answer.text.encode()


async def _carried_whole(answering: Coroutine[Any, Any, Answer | None], path: str) -> WholeTuple | None:
    """v1's own whole-answer call answered in process, as the carrier hands it back: a model call's answer
    as its JSON value (no text written), any other as its text; a 500 when the handler failed; None: declined."""
    try:
        whole = await answering
    except Exception:
        logger.debug("the endpoint failed answering %s in process", path, exc_info=True)
        return (*_server_error(), None)
    if whole is None:
        return None
    headers = {"content-type": JSON_CONTENT_TYPE, **(whole.headers or {})}
    if whole.value is not None:
        return whole.status, headers, b"", whole.value
    return whole.status, headers, whole.text.encode(), None


class RequestHeaders(dict[str, str]):
    """A request's headers as the handler reads them: by name in any case, the first value of a repeated
    header from `get` and every value from `getall` (as aiohttp's server gives them), read once from the
    name-value pairs instead of searched pair by pair on every lookup."""

    __slots__ = ("_repeated",)

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        super().__init__()
        self._repeated: dict[str, list[str]] = {}
        for given_name, value in pairs:
            name = given_name.lower()
            if dict.__contains__(self, name):
                self._repeated.setdefault(name, [dict.__getitem__(self, name)]).append(value)
            else:
                dict.__setitem__(self, name, value)

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())

    def getall(self, name: str, default: list[str]) -> list[str]:
        name = name.lower()
        if name in self._repeated:
            return list(self._repeated[name])
        return [dict.__getitem__(self, name)] if dict.__contains__(self, name) else default


class _InProcessExchange:
    """One request carried in process; implements `v1.interception._exchange.Exchange`."""

    __slots__ = (
        "_body",
        "_max_body_bytes",
        "authorized",
        "chunks",
        "close_after",
        "gone",
        "headers",
        "method",
        "path",
        "ready",
        "stream_headers",
    )

    def __init__(
        self, method: str, path: str, headers: Any, body: bytes, max_body_bytes: int, ready: asyncio.Future[None] | None
    ):
        self.method = method
        self.path = path
        self.headers = headers
        self._body = body
        self._max_body_bytes = max_body_bytes
        self.ready = ready
        self.stream_headers: Mapping[str, str] | None = None
        self.chunks: asyncio.Queue[Any]  # made when the handler opens a stream: most answers are whole
        self.gone = False
        self.close_after = False  # no connection to close: the body is in memory already
        self.authorized: str | None = None

    async def read(self) -> bytes:
        if len(self._body) > self._max_body_bytes:
            raise BodyTooLarge
        return self._body

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        self.chunks = asyncio.Queue()
        self.stream_headers = headers
        if self.ready is not None and not self.ready.done():
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


class EndpointApp:
    """The endpoint's handler as an in-process app: an HTTP library `Request` in, its `Response` out (a stream when it streams).

    Args:
        dispatch: the handler the endpoint's HTTP server runs (`EndpointServer.dispatch`).
        max_body_bytes: the largest body the handler reads (a larger one is refused as over HTTP).
        answer_own: v1's own whole-answer model calls, handed over with their rollout and key
            (`EndpointServer.answer_own_call`), which answers None for any other request.
    """

    def __init__(
        self,
        dispatch: Dispatch,
        max_body_bytes: int,
        answer_own: AnswerOwn | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.max_body_bytes = max_body_bytes
        self.answer_own = answer_own

    async def own_call(self, rollout: str, route: str, api_key: str, body: bytes, read: Any = None) -> WholeTuple | None:
        """v1's own whole-answer call of `rollout` (`InProcessTransport.own_call`, `EndpointServer.answer_own_call`),
        answered as `post` answers one; None: declined (the caller posts it)."""
        if self.answer_own is None:
            return None
        return await _carried_whole(self.answer_own(rollout, route, api_key, body, read), route)

    @staticmethod
    async def _ready(exchange: _InProcessExchange) -> None:
        assert exchange.ready is not None, "a handler of its own announces its answer"
        try:
            await exchange.ready
        except BaseException:  # the caller stopped waiting (its timeout): the answer will not be delivered
            exchange.gone = True
            raise

    async def post(self, path: str, headers: Mapping[str, str], body: bytes) -> WholeTuple:
        """A POST read whole (`InProcessTransport.post`): the handler's answer (header names in lower case), a streamed one gathered.

        Only v1's own whole-answer calls that `EndpointApp.own_call` declined come this way (a request to
        stream, another route: `v1.programs.call_model`), and they wait for their answer: the handler runs
        in the caller's task, awaited directly (no task, no hand-over of the answer). The answer is its
        body (the fourth item None).
        A caller cancelled mid-call (its program's timeout) cancels the call with it: no answer is left to
        deliver or record. Failures read as they do from the handler's own task: a 500, or a broken stream.
        """
        exchange = _InProcessExchange("POST", path, RequestHeaders(headers.items()), body, self.max_body_bytes, None)
        try:
            answer = await self.dispatch(exchange)
        except Exception:
            logger.debug("the endpoint failed answering %s in process", path, exc_info=True)
            if exchange.stream_headers is not None:
                raise http_library().RemoteProtocolError("the endpoint failed mid-stream") from None
            return (*_server_error(), None)
        if exchange.stream_headers is None:
            assert answer is not None, "a handler that did not stream answers"
            return answer.status, {"content-type": JSON_CONTENT_TYPE, **(answer.headers or {})}, answer.text.encode(), None
        chunks = exchange.chunks
        written = [chunks.get_nowait() for _ in range(chunks.qsize())]  # the handler wrote the whole stream
        streamed = b"".join(chunk for chunk in written if chunk is not _END)
        return 200, {name.lower(): value for name, value in exchange.stream_headers.items()}, streamed, None

    async def handle_async_request(self, request: Any) -> Any:
        body = await request.aread()
        pairs = ((name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw)
        exchange, handler = _start(self, request.method, request.url.path, RequestHeaders(pairs), body)
        await self._ready(exchange)
        if exchange.stream_headers is not None:
            return http_library().Response(200, headers=dict(exchange.stream_headers), stream=_chunks_class()(exchange, handler))
        return whole_response(*_whole_answer(handler))


__all__ = ["EndpointApp"]
