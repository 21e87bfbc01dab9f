"""Relaying one streamed answer to the program: its frames as they come, keepalives while the upstream is silent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from v1.interception._dialect import EndpointStreamWriter
from v1.interception._exchange import Exchange

STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class StreamRelay:
    """Writes one streamed answer's frames to `exchange`, opening the stream (and the dialect's writer) on the first.

    The task that creates it relays the whole stream; nothing runs beside it per delta. A timer
    checks for silence: once nothing was written for `keepalive_s`, a keepalive frame is written
    by a short task of its own (the relaying task is waiting for the upstream then). When that
    write finds the program gone, the relaying task is cancelled so the upstream call stops, and
    `left` says why (`settle` tells that cancellation from any other).
    """

    def __init__(self, exchange: Exchange, open_writer: Callable[[], EndpointStreamWriter], keepalive_s: float) -> None:
        self.writer: EndpointStreamWriter | None = None
        self.left = False
        self._exchange = exchange
        self._open_writer = open_writer
        self._lock = asyncio.Lock()  # the relay's frames and a keepalive never interleave
        self._keepalive_s = keepalive_s
        self._loop = asyncio.get_running_loop()
        self._relaying = asyncio.current_task()
        self._last_write = self._loop.time()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(keepalive_s, self._check_silence)
        self._keeping: asyncio.Task[None] | None = None

    async def send(self, frames_of: Callable[[EndpointStreamWriter], Iterable[bytes]]) -> None:
        """Write the frames `frames_of(writer)` renders, after the stream's opening frames if it was not open yet."""
        self._last_write = self._loop.time()
        async with self._lock:
            writer = self.writer
            if writer is None:
                await self._exchange.open_stream(STREAM_HEADERS)
                writer = self.writer = self._open_writer()
                for frame in writer.start():
                    await self._exchange.write(frame)
            for frame in frames_of(writer):
                await self._exchange.write(frame)

    def settle(self) -> bool:
        """In the relaying task, on `CancelledError`: True when it was this relay's (the program left), now absorbed."""
        if not self.left:
            return False
        uncancel = getattr(self._relaying, "uncancel", None)  # Python 3.11+: keep the task's cancel count true
        return uncancel is None or uncancel() == 0

    async def close(self) -> None:
        """Stop the keepalives (waiting for one being written)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        keeping = self._keeping
        if keeping is not None and not keeping.done():
            keeping.cancel()
            with contextlib.suppress(BaseException):
                await keeping

    def _check_silence(self) -> None:
        silent_for = self._loop.time() - self._last_write
        if silent_for < self._keepalive_s:
            self._timer = self._loop.call_later(self._keepalive_s - silent_for, self._check_silence)
        else:
            self._keeping = self._loop.create_task(self._keepalive())

    async def _keepalive(self) -> None:
        try:
            await self.send(lambda writer: (writer.keepalive,))
        except Exception:  # the program went away (a closed connection), or its stream broke
            self.left = True
            if self._relaying is not None:
                self._relaying.cancel()
            return
        if self._timer is not None:  # not closed meanwhile
            self._timer = self._loop.call_later(self._keepalive_s, self._check_silence)


__all__ = ["STREAM_HEADERS", "StreamRelay"]
