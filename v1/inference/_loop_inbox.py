"""`LoopInbox`: hands items from another thread to asyncio queues with one loop wake-up per flush.

The engine thread produces an event per sequence per decoding step, a few hundred a step for
a trainer's round. `call_soon_threadsafe` per event writes the loop's self-pipe and schedules
a callback each time, and the loop, woken on the other core, takes the GIL to deliver one
event while the engine waits for it back. The inbox appends under a lock instead; the
producer calls `flush` when a burst ends (the engine: after each step), which schedules one
drain that delivers everything put so far, in order.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Any


class LoopInbox:
    """Items for queues on `loop`, put from any thread and delivered in order by one drain per `flush`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.drains = 0
        """How many times the loop was woken to deliver (for benchmarks)."""
        self._items: deque[tuple[asyncio.Queue[Any], Any]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, queue: asyncio.Queue[Any], item: Any) -> None:
        """Hold `item` for `queue` until the next `flush` (thread-safe)."""
        with self._lock:
            self._items.append((queue, item))

    def flush(self) -> None:
        """Deliver everything put so far on the loop soon (thread-safe; `RuntimeError` if the loop is closed)."""
        with self._lock:
            if self._scheduled or not self._items:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:
            with self._lock:
                self._scheduled = False
            raise

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, deque()
            self._scheduled = False
        self.drains += 1
        for queue, item in items:
            queue.put_nowait(item)


__all__ = ["LoopInbox"]
