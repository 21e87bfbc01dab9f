"""`EndpointRelay`: the host end of a rollout's way from a sandbox to the endpoint, with limits a program can't get around.

A sandboxed command reaches the endpoint only through a Unix socket of its own
rollout (`RolloutRelays`), each connection copied to a TCP connection to the
endpoint. The relay speaks for that one rollout: it carries one request per
connection, whose head it rewrites to end the connection after the answer and
to name the rollout (`PIN_HEADER`, which the endpoint checks against the
request's URL), so a key of another rollout sharing the sandbox gets a 401. A
program can open connections as fast as it likes, so the relay caps how many
it holds open at once (`max_connections`; more get an immediate 503 in OpenAI's
error shape with `Retry-After`, and cost the host nothing), and a connection
must send its request head within `head_timeout` seconds (a slowloris holds
nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from v1.sandbox._backend import PIN_HEADER, EndpointTarget

MAX_CONNECTIONS = 64
"""Connections one sandbox may hold open to the endpoint at once (each costs the in-sandbox relay two threads)."""
HEAD_TIMEOUT_S = 10.0
"""Seconds a new connection has to send its first request's head (request line and headers)."""
MAX_HEAD_BYTES = 64 * 1024
_DROPPED = {b"connection", b"keep-alive", b"proxy-connection", PIN_HEADER.lower().encode()}


def _error_answer(status: str, message: str, type_: str, code: str, extra: str = "") -> bytes:
    body = json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return (head + body).encode()


def busy_answer(message: str) -> bytes:
    """A whole HTTP 503 with `Retry-After`, in OpenAI's error shape (the relay does not know the dialect)."""
    return _error_answer("503 Service Unavailable", message, "server_error", "too_many_connections", "Retry-After: 1\r\n")


MALFORMED = _error_answer("400 Bad Request", "malformed request head", "invalid_request_error", "invalid_request")


def pin_head(head: bytes, rollout: str) -> bytes | None:
    """A request head (through its blank line) rewritten to name `rollout` and close the connection after it.

    None when it is not a plain HTTP/1 head: a folded line, a bare CR or LF, a line with no colon.
    """
    lines = head.removesuffix(b"\r\n\r\n").split(b"\r\n")
    if any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines):
        return None
    kept = [lines[0]]
    for line in lines[1:]:
        name, colon, _ = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            return None
        if name.lower() not in _DROPPED:
            kept.append(line)
    kept += [b"Connection: close", f"{PIN_HEADER}: {rollout}".encode()]
    return b"\r\n".join(kept) + b"\r\n\r\n"


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy `reader` to `writer` until either ends; then close `writer`."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class EndpointRelay:
    """Serves one sandbox's connections to the endpoint; see the module docs."""

    def __init__(
        self, endpoint: EndpointTarget, rollout: str, max_connections: int = MAX_CONNECTIONS, head_timeout: float = HEAD_TIMEOUT_S
    ) -> None:
        self.endpoint = endpoint
        self.rollout = rollout
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.open = 0
        self.refused = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection from the sandbox: refused when too many are open, dropped when its head is slow."""
        if self.open >= self.max_connections:
            self.refused += 1
            with contextlib.suppress(Exception):
                writer.write(busy_answer(f"this sandbox holds {self.open} connections to the endpoint already; retry later"))
                await asyncio.wait_for(writer.drain(), 1)
            writer.close()
            return
        self.open += 1
        try:
            await self._relay(reader, writer)
        finally:
            self.open -= 1

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head, rest = await asyncio.wait_for(read_head(reader), self.head_timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        pinned = pin_head(head, self.rollout)
        if pinned is None:
            with contextlib.suppress(Exception):
                writer.write(MALFORMED)
                await asyncio.wait_for(writer.drain(), 1)
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.endpoint.host, self.endpoint.port)
        except OSError:
            writer.close()
            return
        up_writer.write(pinned + rest)
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """(the first request's head through its blank line, the bytes read after it); at most `MAX_HEAD_BYTES`."""
    seen = b""
    while (end := seen.find(b"\r\n\r\n")) < 0:
        if len(seen) > MAX_HEAD_BYTES:
            raise asyncio.LimitOverrunError("request head too large", len(seen))
        chunk = await reader.read(65536)
        if not chunk:
            raise asyncio.IncompleteReadError(seen, None)
        seen += chunk
    return seen[: end + 4], seen[end + 4 :]


def socket_name(rollout: str) -> str:
    """A rollout's endpoint socket's file name: short (socket paths hold 108 bytes) and safe whatever the id."""
    return f"endpoint-{hashlib.sha256(rollout.encode()).hexdigest()[:16]}.sock"


class RolloutSockets(ABC):
    """Unix sockets in `run_dir`, one per rollout while a command of that rollout runs, each serving `handler(rollout)`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.servers: dict[Any, asyncio.AbstractServer] = {}
        self.users: dict[Any, int] = {}
        self._starting = asyncio.Lock()

    @abstractmethod
    def socket_name(self, rollout: Any) -> str:
        """The file name of `rollout`'s socket in `run_dir`."""

    @abstractmethod
    def handler(self, rollout: Any) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        """What serves each connection to `rollout`'s socket."""

    async def acquire(self, rollout: Any) -> Path:
        """The host path of `rollout`'s socket, served until each `acquire` has had its `release`."""
        path = self.run_dir / self.socket_name(rollout)
        async with self._starting:  # two commands of one rollout starting at once share one socket
            if rollout not in self.servers:
                self.servers[rollout] = await asyncio.start_unix_server(self.handler(rollout), path=str(path))
            self.users[rollout] = self.users.get(rollout, 0) + 1
        return path

    async def release(self, rollout: Any) -> None:
        """One command of `rollout` ended; with the last, its socket goes away (its key reaches nothing here)."""
        if rollout not in self.users:  # closed while the command ran (its sandbox deleted at its lifetime): gone already
            return
        self.users[rollout] -= 1
        if self.users[rollout] == 0:
            del self.users[rollout]
            self.servers.pop(rollout).close()
            with contextlib.suppress(OSError):
                (self.run_dir / self.socket_name(rollout)).unlink()

    async def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        self.users.clear()


class RolloutRelays(RolloutSockets):
    """A sandbox's endpoint sockets: one per rollout while a command of that rollout runs, in `run_dir`."""

    def __init__(self, endpoint: EndpointTarget, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.endpoint = endpoint

    def socket_name(self, rollout: str) -> str:
        return socket_name(rollout)

    def handler(self, rollout: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        return EndpointRelay(self.endpoint, rollout).serve


__all__ = [
    "RolloutSockets",
    "HEAD_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "PIN_HEADER",
    "EndpointRelay",
    "RolloutRelays",
    "busy_answer",
    "pin_head",
    "pump",
    "read_head",
    "socket_name",
]
