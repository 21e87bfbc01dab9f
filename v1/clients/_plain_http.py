"""Keep-alive HTTP/1.1 over plain TCP, for the wire's whole-answer posts to an ``http://`` upstream.

A local model server (vLLM, SGLang, a trainer's inference workers) is reached over plain HTTP, often
thousands of requests at once, and the client's own cost per request is then what bounds a
rollout's rate. aiohttp's request path (its session, request and response objects, cookie jar,
tracing, redirect loop) executes about 0.40 M instructions a request against a mock on loopback;
this pool, which does only what a POST with a whole answer needs, about 0.12 M (benchmarks/README.md,
"The eighth pass"). The parsing is httptools' (llhttp, uvicorn's parser): status line, headers,
`Content-Length`, chunked bodies and keep-alive are read by it, not here.

What an answer may do is bounded as the aiohttp path bounds it (`AnswerLimits`): at most
`max_bytes` of body, decoded (a compressed body is inflated within the same limit), and the whole
answer within the deadline; besides, no wait for bytes longer than `read_timeout` (aiohttp's
``sock_read``), headers of at most `MAX_HEAD_BYTES`, and a connection that breaks HTTP/1.1 is
closed with an `UpstreamProtocolError`. A connection is reused only after an answer read to its
end that the server did not close; a call cancelled or failed mid-answer closes its connection.
TLS, proxies and streamed answers stay on aiohttp (`OpenAIWire`).
"""

from __future__ import annotations

import asyncio
import contextvars
import zlib
from collections import deque
from typing import TYPE_CHECKING

import httptools

if TYPE_CHECKING:
    from v1.clients._answer_limits import AnswerLimits

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes an answer's status line and headers may take."""
IDLE_S = 15.0
"""How long a connection may wait in the pool for its next request (aiohttp's ``keepalive_timeout``)."""
ACCEPT_ENCODING = b"Accept-Encoding: gzip, deflate\r\n"
"""What the SDK's and aiohttp's clients ask for: an answer either way is decoded within `max_bytes`."""
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


Answer = tuple[int, dict[str, str], bytes]
"""An answer as read: its status, its headers (names in lower case) and its body."""


class UpstreamProtocolError(ConnectionError):
    """The upstream broke HTTP/1.1: an answer that does not parse, headers too large, a connection closed mid-answer."""


def header_lines(headers: dict[str, str]) -> bytes:
    """`headers` as HTTP/1.1 header lines (UTF-8, as aiohttp writes them).

    Raises:
        ValueError: a name that is not an HTTP token, or a value with a line break or NUL (a header
            smuggled into the request), as aiohttp refuses them.
    """
    lines = []
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        if not raw_name or not _TOKEN.issuperset(raw_name):
            raise ValueError(f"invalid HTTP header name: {name!r}")
        if b"\r" in raw_value or b"\n" in raw_value or b"\0" in raw_value:
            raise ValueError(f"the value of the HTTP header {name!r} holds a line break or NUL")
        lines.append(b"%s: %s\r\n" % (raw_name, raw_value))
    return b"".join(lines)


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one exchange at a time, its answer parsed as it arrives."""

    def __init__(self, pool: PlainHTTPPool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.waiter: asyncio.Future[Answer] | None = None
        self.limits: AnswerLimits | None = None
        self.read_timeout = 0.0
        self.last_read = 0.0
        self.armed_after = 0.0
        self.at_deadline = False
        self.timer: asyncio.TimerHandle | None = None
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.size = 0
        self.head_size = 0
        """Bytes read before the headers ended (a header that never ends is bounded by it)."""
        self.header_bytes = 0
        self.head_done = False

    # -- an exchange --------------------------------------------------------------------------

    def send(self, request: bytes, limits: AnswerLimits, read_timeout: float) -> asyncio.Future[Answer]:
        """Write `request`; the future of its answer: status, headers (lower-case names), raw body."""
        assert self.transport is not None and self.waiter is None
        waiter = self.waiter = self.loop.create_future()
        self.limits, self.read_timeout = limits, read_timeout
        self.last_read = self.loop.time()
        self._arm()
        self.transport.write(request)
        return waiter

    def _arm(self) -> None:
        """One timer for both limits on time: the answer's deadline, or `read_timeout` after the last byte."""
        assert self.limits is not None
        quiet_until = self.last_read + self.read_timeout
        self.at_deadline = quiet_until >= self.limits.deadline
        self.armed_after = self.last_read
        when = self.limits.deadline if self.at_deadline else quiet_until
        # A context of its own: a cancelled timer waits in plain asyncio's heap, and the caller's would keep its rollout.
        self.timer = self.loop.call_at(when, self._on_timer, context=contextvars.Context())

    def _on_timer(self) -> None:
        limits = self.limits
        if self.waiter is None or limits is None:
            return
        if self.at_deadline:
            self._fail(limits.too_slow())
        elif self.last_read != self.armed_after:  # bytes came meanwhile: the wait counts from the last of them
            self._arm()
        else:
            self._fail(TimeoutError(f"no byte of the answer arrived for {self.read_timeout:g} s"))

    def _fail(self, error: BaseException) -> None:
        """End the exchange with `error` and close the connection (what is left of its answer is never read)."""
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _reset(self) -> None:
        self.headers = {}
        self.chunks = []
        self.size = self.head_size = self.header_bytes = 0
        self.head_done = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection can't be trusted with a next request
            self.abort()
            return
        self.last_read = self.loop.time()
        if not self.head_done:
            self.head_size += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"the upstream's answer is not HTTP/1.1 ({exc})"))
            return
        if not self.head_done and self.head_size > MAX_HEAD_BYTES and self.waiter is not None:
            self._fail(UpstreamProtocolError(f"the upstream's answer headers are larger than {MAX_HEAD_BYTES} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None:
            if exc is None and self.head_done and self._ends_at_close():
                self._complete(keep=False)
            else:
                self._fail(UpstreamProtocolError("the upstream closed the connection before its answer ended"))
        self.pool.lost(self)

    def _ends_at_close(self) -> bool:
        """Whether the answer's body is delimited by the connection's end (no length, not chunked)."""
        headers = self.headers
        return "content-length" not in headers and "chunked" not in headers.get("transfer-encoding", "").lower()

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.waiter is None:  # an answer nobody asked for, in the bytes of the last one: never reuse this connection
            self.abort()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4
        if self.header_bytes > MAX_HEAD_BYTES and self.waiter is not None:  # headers that end within one read
            self._fail(UpstreamProtocolError(f"the upstream's answer headers are larger than {MAX_HEAD_BYTES} bytes"))
            return
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        if self.waiter is None or self.limits is None:
            return
        self.size += len(body)
        if self.size > self.limits.max_bytes:
            self._fail(self.limits.too_large())
            return
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is None:
            return
        if self.parser.get_status_code() < 200:  # an informational answer: the real one follows on this connection
            self._reset()
            return
        self._complete(keep=self.parser.should_keep_alive())

    def _complete(self, keep: bool) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        answer = (self.parser.get_status_code(), self.headers, body)
        self._reset()
        self.limits = None
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)
        if keep and not self.closed:
            self.pool.release(self)
        elif not self.closed:
            self.closed = True
            assert self.transport is not None
            self.transport.close()


class PlainHTTPPool:
    """Keep-alive HTTP/1.1 connections to one ``host:port`` over plain TCP, at most `max_connections` open.

    Made on the running loop and used on it only (as an aiohttp session is). `post` writes a request
    and reads its whole answer; a request that finds every connection busy waits for one.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.loop = asyncio.get_running_loop()
        self.open = 0
        """Connections open or being opened."""
        self._idle: dict[_Connection, None] = {}  # in the order they became idle: the newest is reused first
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    async def post(self, request: bytes, limits: AnswerLimits) -> Answer:
        """Send `request` (head and body) and read the whole answer within `limits`: status, headers, body
        (decoded when the answer is compressed).

        Raises:
            ModelError: the answer passed `limits` (`AnswerLimits.too_large`, `too_slow`).
            TimeoutError: no connection within `connect_timeout`, or no byte for `read_timeout`.
            OSError: the connection failed (`UpstreamProtocolError`: the answer broke HTTP/1.1).
        """
        connection = self._reusable()
        if connection is None:
            connection = await self._acquire(limits)
        waiter = connection.send(request, limits, self.read_timeout)
        try:
            status, headers, body = await waiter
        except asyncio.CancelledError:
            if not waiter.done() or waiter.cancelled():  # cancelled mid-answer: the rest of it must never be read
                connection.abort()
            raise
        encoding = headers.get("content-encoding")
        if encoding is not None and encoding.strip().lower() not in ("", "identity"):
            body = _decoded(body, encoding, limits)
        return status, headers, body

    def _reusable(self) -> _Connection | None:
        idle, now = self._idle, self.loop.time()
        while idle:
            connection = idle.popitem()[0]
            if not connection.closed and now - connection.idle_since < IDLE_S:
                return connection
            connection.abort()
        return None

    async def _acquire(self, limits: AnswerLimits) -> _Connection:
        """A connection for the next request: a new one while fewer than `max_connections` are open, else the
        first one given back (within the answer's deadline)."""
        if self._closed:
            raise ConnectionError("the upstream's connection pool is closed")
        # `within`'s timer holds no context (an `asyncio.timeout_at` here kept the caller's rollout in plain asyncio's heap)
        return await limits.within(self._connection())

    async def _connection(self) -> _Connection:
        while True:
            if self.open < self.max_connections:
                return await self._connect()
            handed = await self._wait()
            if handed is not None and not handed.closed:  # the server may have closed it on the way
                return handed

    async def _wait(self) -> _Connection | None:
        """A connection given back, or None when one closed (a slot to connect in)."""
        waiter: asyncio.Future[_Connection | None] = self.loop.create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed over as this call was cancelled: pass it on
                handed = waiter.result()
                if handed is not None:
                    self.release(handed)
                else:
                    self._wake()
            raise

    async def _connect(self) -> _Connection:
        self.open += 1
        # Opened in a context of its own: the transport's callbacks keep the context they were made in for
        # the connection's life, and the caller's holds its rollout (its state, through the harness).
        opening = asyncio.create_task(self._open(), context=contextvars.Context())
        try:
            connection = await opening
        except BaseException as exc:
            if opening.done() and not opening.cancelled() and opening.exception() is None:
                self.release(opening.result())  # opened as its caller was cancelled: the next request takes it
                raise
            self.open -= 1
            self._wake()
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):  # refused, unreachable, no such host
                raise ConnectionError(f"cannot connect to {self.host}:{self.port}") from exc
            raise
        return connection

    async def _open(self) -> _Connection:
        async with asyncio.timeout(self.connect_timeout):
            _, connection = await self.loop.create_connection(lambda: _Connection(self), self.host, self.port)
        return connection

    def release(self, connection: _Connection) -> None:
        """Give back a connection whose answer was read to its end: to a waiting request, else to the idle set."""
        if connection.closed:
            return
        if self._closed:
            connection.abort()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        connection.idle_since = self.loop.time()
        self._idle[connection] = None
        if self._sweep is None:
            self._sweep = self.loop.call_later(IDLE_S, self._close_stale)

    def lost(self, connection: _Connection) -> None:
        """A connection ended (closed by either side): its slot is free."""
        self.open -= 1
        self._idle.pop(connection, None)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_stale(self) -> None:
        """Close the connections idle for `IDLE_S` (oldest first), and look again while any stay idle."""
        self._sweep = None
        now = self.loop.time()
        for connection in list(self._idle):
            if now - connection.idle_since < IDLE_S:
                break
            del self._idle[connection]
            connection.abort()
        if self._idle and not self._closed:
            self._sweep = self.loop.call_later(IDLE_S, self._close_stale)

    def close(self) -> None:
        """Close every idle connection; the busy ones close as their answers end. Waiting requests fail."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        while self._idle:
            self._idle.popitem()[0].abort()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionError("the upstream's connection pool is closed"))


def _decoded(body: bytes, encoding: str, limits: AnswerLimits) -> bytes:
    """`body` inflated (``gzip``, ``deflate`` with or without its zlib header), at most `limits.max_bytes` of it."""
    name = encoding.strip().lower()
    if name in ("gzip", "x-gzip"):
        candidates = [16 + zlib.MAX_WBITS]
    elif name == "deflate":
        candidates = [zlib.MAX_WBITS, -zlib.MAX_WBITS]
    else:
        raise UpstreamProtocolError(f"the upstream's answer is encoded as {encoding!r}, which was not asked for")
    for wbits in candidates:
        inflater = zlib.decompressobj(wbits)
        try:
            decoded = inflater.decompress(body, limits.max_bytes + 1)
        except zlib.error:
            continue
        if len(decoded) > limits.max_bytes:
            raise limits.too_large()
        if inflater.eof:
            return decoded
    raise UpstreamProtocolError(f"the upstream's answer does not decode as {encoding!r}")


__all__ = ["ACCEPT_ENCODING", "MAX_HEAD_BYTES", "PlainHTTPPool", "UpstreamProtocolError", "header_lines"]
