"""In-process Python programs: a callable `(task, state)` or an importable `"pkg.module:fn"`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from v1._calling import call_user_code

if TYPE_CHECKING:
    from v1.state import State
    from v1.task import Task


async def run_callable(fn: Callable[..., Any], task: Task, state: State) -> Any:
    """Await an async program; run a sync one in a worker thread so the endpoint keeps serving."""
    return await call_user_code(fn, task, state)


__all__ = ["run_callable"]
