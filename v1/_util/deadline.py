"""`Deadline`: `asyncio.timeout_at` as a plain `with` on one timer handle that holds no context."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any


class Deadline:
    """`asyncio.timeout_at(when)` around one stretch of a task, as a plain `with` on one timer handle.

    The same semantics (the task is cancelled at `when`; on the way out that cancellation, and only
    that one, becomes `TimeoutError`; a cancellation from elsewhere still propagates), without
    `asyncio.Timeout`'s asynchronous enter and exit and its state machine (every model answer runs one), and
    without keeping the caller's context on the loop.
    """

    __slots__ = ("_cancelling", "_handle", "_task", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a deadline needs a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.expired = False
        # A context of its own: a cancelled timer waits in plain asyncio's heap (until it reaches the front), and the
        # caller's context would keep what it holds (a rollout's state, through the harness) alive that long.
        self._handle = loop.call_at(when, self._expire, context=contextvars.Context())

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: Any) -> None:
        self._handle.cancel()
        if self.expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


def within(seconds: float) -> Deadline:
    """A `Deadline` `seconds` from now on the running loop (for the running task)."""
    loop = asyncio.get_running_loop()
    return Deadline(loop, loop.time() + seconds)


__all__ = ["Deadline", "within"]
