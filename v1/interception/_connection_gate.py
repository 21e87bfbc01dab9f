"""`ConnectionGate`: the endpoint's TCP listener, which accepts only as many connections as it can hold.

An unsandboxed command can open connections to the endpoint as fast as it
likes. Accepting them all would run the process out of file descriptors
(EMFILE): then nothing else in it can open a file, a pipe or a socket, and the
event loop logs every failed accept. So the gate raises the process's
descriptor limit to its hard limit at start, holds at most `connection_limit`
connections (half that limit, at most `MAX_CONNECTIONS`), and past it first
closes the oldest idle connection (one with no request in progress: a
slowloris or a parked keep-alive) and, when none is idle, answers the newcomer
a 503 with `Retry-After` in OpenAI's error shape (no request has been read, so
no dialect is known) and closes it. Idle connections are also closed after
`IDLE_TIMEOUT_S` by the HTTP server (its keep-alive timeout, which starts at
connect, so a head that never ends is dropped too).

A connection is busy (never evicted) while a request on it is answered. So that
one rollout cannot make every connection busy (slow bodies, say), the server
names the rollout of each authorized request, and the gate holds at most
`PER_ROLLOUT_BUSY` busy connections per rollout (`admits`); the server refuses
the rest, and bounds how long a body may take to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 4096
"""The most TCP connections the endpoint holds open at once, whatever the descriptor limit."""
IDLE_TIMEOUT_S = 30.0
"""Seconds a connection may wait for its next (or first) request before the server closes it."""
PER_ROLLOUT_BUSY = 128
"""Connections one rollout may have requests in progress on at once (twice the endpoint's in-flight cap)."""
ACCEPTS_PER_WAKE = 64
RESOURCE_PAUSE_S = 0.1
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_BUSY_BODY = b'{"error":{"message":"the endpoint holds too many connections; retry later","type":"server_error","param":null,"code":"too_many_connections"}}'
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


def connection_limit(descriptor_limit: int) -> int:
    """Connections the endpoint holds at most: half the descriptors (the rest are the process's), within bounds."""
    return max(32, min(MAX_CONNECTIONS, descriptor_limit // 2))


class ConnectionGate:
    """Accepts TCP connections for `factory` (an HTTP server's protocol factory); see the module docs.

    Args:
        factory: makes the protocol of an accepted connection.
        connections: the protocols whose connections are open now (oldest first), each with `force_close()`.
        limit: the most connections held open at once.
    """

    def __init__(self, factory: Callable[[], asyncio.Protocol], connections: Callable[[], Sequence[Any]], limit: int) -> None:
        self.factory = factory
        self.connections = connections
        self.limit = limit
        self.refused = 0
        self.evicted = 0
        self.accept_failures = 0
        self._accepted = 0  # accepted, their protocol not made yet (then `connections` counts them)
        self._tasks: set[asyncio.Task[None]] = set()
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving: Counter[Any] = Counter()  # transport -> requests being answered on it
        self._busy_of: Counter[str] = Counter()  # rollout -> requests of it being answered
        self.per_rollout = PER_ROLLOUT_BUSY

    def admits(self, rollout: str | None) -> bool:
        """Whether `rollout` (None: a request no rollout is known for) may have one more busy connection."""
        return rollout is None or self._busy_of[rollout] < self.per_rollout

    @contextlib.contextmanager
    def serving(self, transport: Any, rollout: str | None = None) -> Iterator[None]:
        """Mark `transport`'s connection busy while a request on it (of `rollout`) is answered (an idle one may be evicted)."""
        self._serving[transport] += 1
        if rollout is not None:
            self._busy_of[rollout] += 1
        try:
            yield
        finally:
            self._serving[transport] -= 1
            if not self._serving[transport]:
                del self._serving[transport]
            if rollout is not None:
                self._busy_of[rollout] -= 1
                if not self._busy_of[rollout]:
                    del self._busy_of[rollout]

    def _is_idle(self, handler: Any) -> bool:
        """An open connection with no request being answered (a parked keep-alive, or a head still arriving);
        one already closing is not evicted again."""
        transport = getattr(handler, "transport", None)
        if transport is None or transport.is_closing():
            return False
        return transport not in self._serving

    def listen(self, host: str, backlog: int) -> int:
        """Start accepting on `host` at a free port; the port."""
        self._loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(backlog)
        sock.setblocking(False)
        self._socket = sock
        self._loop.add_reader(sock.fileno(), self._accept_ready)
        return int(sock.getsockname()[1])

    def close(self) -> None:
        """Stop accepting (open connections are the server's to close)."""
        if self._socket is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._socket.fileno())
            self._socket.close()
            self._socket = None

    def _accept_ready(self) -> None:
        assert self._socket is not None
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, _ = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                self._pause(exc)
                return
            if len(self.connections()) + self._accepted >= self.limit and not self._evict_idle():
                self._refuse(conn)
                continue
            self._accepted += 1
            task = asyncio.ensure_future(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        assert self._loop is not None
        made = False

        def protocol() -> asyncio.Protocol:
            nonlocal made
            made = True
            self._accepted -= 1
            return self.factory()

        try:
            await self._loop.connect_accepted_socket(protocol, sock=conn)
        except OSError:
            conn.close()
        finally:
            if not made:
                self._accepted -= 1

    def _evict_idle(self) -> bool:
        for handler in self.connections():
            if self._is_idle(handler):
                handler.force_close()
                self.evicted += 1
                return True
        return False

    def _refuse(self, conn: socket.socket) -> None:
        self.refused += 1
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(BUSY)
        conn.close()

    def _pause(self, exc: OSError) -> None:
        """Out of descriptors anyway (other parts of the process hold them): accept again shortly, log once."""
        assert self._socket is not None and self._loop is not None
        self.accept_failures += 1
        if self.accept_failures == 1:
            logger.warning("the endpoint could not accept a connection (%s); it retries every %g s", exc, RESOURCE_PAUSE_S)
        sock = self._socket
        self._loop.remove_reader(sock.fileno())
        self._loop.call_later(RESOURCE_PAUSE_S, self._resume, sock)

    def _resume(self, sock: socket.socket) -> None:
        if self._socket is sock and self._loop is not None:
            self._loop.add_reader(sock.fileno(), self._accept_ready)


__all__ = [
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "PER_ROLLOUT_BUSY",
    "ConnectionGate",
    "connection_limit",
]
