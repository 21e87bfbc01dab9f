"""Process-wide resources for the running event loop.

The interception endpoint and the shared upstream clients live on the event
loop that runs the rollouts (one loop per process in practice). `LoopScope`
holds them, creates each once (concurrent first callers share one creation),
and closes them when the loop shuts down: `asyncio.run`, `asyncio.Runner` and
pytest-asyncio all finalize async generators before closing the loop, and the
scope keeps one suspended generator whose `finally` does the closing.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from v1._util.single_flight import SingleFlight
from v1._util.weak_identity import WeakIdentityMap

logger = logging.getLogger(__name__)

T = TypeVar("T")


_ABSENT = object()
"""What `LoopScope.get` finds for a key with no resource yet (None may be a resource)."""


class LoopScope:
    def __init__(self) -> None:
        self._resources: dict[Any, Any] = {}
        self._creations: SingleFlight[Any, Any] = SingleFlight()
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._sentinel: AsyncIterator[None] | None = None
        self.closed = False

    async def get(self, key: Any, create: Callable[[], Awaitable[tuple[T, Callable[[], Awaitable[None]]]]]) -> T:
        """The resource under `key`, created by `create()` (which returns it and its async closer) once."""
        resource = self._resources.get(key, _ABSENT)
        if resource is not _ABSENT:
            return resource  # type: ignore[no-any-return]

        async def create_and_keep() -> Any:
            resource, closer = await create()
            self._resources[key] = resource
            self._closers.append(closer)
            return resource

        def create_apart() -> Awaitable[Any]:
            # In a context of its own: a loop-wide resource (the endpoint, a connection pool) serves every rollout,
            # and its sockets' callbacks keep the context they were made in; the first caller's is one rollout's.
            return asyncio.create_task(create_and_keep(), context=contextvars.Context())

        return await self._creations.run(key, create_apart)  # type: ignore[no-any-return]

    def peek(self, key: Any) -> Any:
        return self._resources.get(key)

    async def aclose(self) -> None:
        """Close every resource, newest first. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        closers, self._closers = self._closers[::-1], []
        self._resources.clear()
        for closer in closers:
            try:
                await closer()
            except Exception:  # a failing closer must not keep the others open
                logger.exception("closing a loop-scoped resource failed")


_scopes: WeakIdentityMap[asyncio.AbstractEventLoop, LoopScope] = WeakIdentityMap()


async def _close_at_loop_shutdown(scope: LoopScope) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await scope.aclose()


async def loop_scope() -> LoopScope:
    """The scope of the running loop, created on first use."""
    loop = asyncio.get_running_loop()
    scope = _scopes.get(loop)
    if scope is None or scope.closed:
        scope = LoopScope()
        _scopes[loop] = scope
        sentinel = _close_at_loop_shutdown(scope)
        await sentinel.__anext__()
        scope._sentinel = sentinel  # held so only loop shutdown (not GC) finalizes it
    return scope


async def close_loop_scope() -> None:
    """Close the running loop's endpoint server and shared clients now."""
    scope = _scopes.pop(asyncio.get_running_loop())
    if scope is not None:
        await scope.aclose()


UVLOOP_ENV = "V1_UVLOOP"
"""Set to ``0`` to run on asyncio's own event loop even where uvloop is installed."""


def uvloop_enabled() -> bool:
    """Whether `run` uses uvloop: installed (the `speed` extra) and not turned off by ``V1_UVLOOP=0``."""
    return os.environ.get(UVLOOP_ENV, "1") != "0" and importlib.util.find_spec("uvloop") is not None


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, on uvloop's event loop when `uvloop_enabled()` (Python 3.11+), closing the loop scope alike."""
    runner_class = getattr(asyncio, "Runner", None)
    if runner_class is None or not uvloop_enabled():
        return asyncio.run(main)
    import uvloop

    with runner_class(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)  # type: ignore[no-any-return]


__all__ = ["UVLOOP_ENV", "LoopScope", "close_loop_scope", "loop_scope", "run", "uvloop_enabled"]
