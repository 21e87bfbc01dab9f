"""`SingleFlight`: calls under one key that overlap share the one run in flight.

Used where a second caller must get the first caller's result rather than start
the work again: the loop scope's resources (created once by concurrent first
callers) and the endpoint's deduplication of an SDK's retry of a call still in
flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """The runs in flight, one per key; a failure reaches every caller that joined it."""

    def __init__(self) -> None:
        self._in_flight: dict[K, asyncio.Future[V]] = {}

    def pending(self, key: K) -> asyncio.Future[V] | None:
        """The run in flight under `key`, if any."""
        return self._in_flight.get(key)

    def start(self, key: K) -> asyncio.Future[V]:
        """Announce a run under `key` (replacing any earlier one: later joiners get this run)."""
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        return future

    def finish(self, key: K, future: asyncio.Future[V], result: V | None = None, error: BaseException | None = None) -> None:
        """Settle a run announced by `start`: its result, its exception, or cancelled for a non-`Exception`."""
        if self._in_flight.get(key) is future:
            del self._in_flight[key]
        if future.done():
            return
        if error is None:
            future.set_result(result)  # type: ignore[arg-type]
        elif isinstance(error, Exception):
            future.set_exception(error)
            future.exception()  # retrieved: no "never retrieved" warning when nobody joined
        else:
            future.cancel()

    async def run(self, key: K, work: Callable[[], Awaitable[V]], *, join: bool = True) -> V:
        """`work()`'s result; with `join`, a run already in flight under `key` is awaited instead."""
        if join:
            pending = self._in_flight.get(key)
            if pending is not None:
                return await asyncio.shield(pending)
        future = self.start(key)
        try:
            result = await work()
        except BaseException as exc:
            self.finish(key, future, error=exc)
            raise
        self.finish(key, future, result)
        return result


__all__ = ["SingleFlight"]
