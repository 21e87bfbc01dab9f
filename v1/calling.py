"""Calling user code from the event loop without blocking it."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions and objects whose `__call__` is one (partials included)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call_method = inspect.getattr_static(type(fn), "__call__", None)
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(call_method)


async def call_user_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await an async callable; run a sync one in a worker thread (so the endpoint keeps serving).

    A sync callable that returns an awaitable has it awaited too.
    """
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    result = await asyncio.to_thread(fn, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


__all__ = ["call_user_code", "is_async_callable"]
