"""In-process Python programs: a callable `(task, state)` or an importable `"pkg.module:fn"`."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from v1.state import State
    from v1.task import Task


async def run_callable(fn: Callable[..., Any], task: Task, state: State) -> Any:
    """Await an async program; run a sync one in a worker thread so the endpoint keeps serving."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        return await fn(task, state)
    result = await asyncio.to_thread(fn, task, state)
    return await result if inspect.isawaitable(result) else result


__all__ = ["run_callable"]
