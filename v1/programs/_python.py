"""In-process Python programs: a callable `(task, state)` or an importable `"pkg.module:fn"`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from v1._util.calling import call_user_code

if TYPE_CHECKING:
    from v1.rollout import State, Task


async def run_callable(fn: Callable[..., Any], task: Task, state: State) -> None:
    """Await an async program; run a sync one in a worker thread so the endpoint keeps serving.

    What it returns is merged as `merge_returned` says.
    """
    merge_returned(state, await call_user_code(fn, task, state))


def merge_returned(state: State, result: Any) -> None:
    """Merge a program's returned mapping into its state (guarded); its own state, None or another value merge nothing.

    Raises:
        StateFieldError: the mapping writes a framework-managed field.
    """
    if isinstance(result, Mapping) and result is not state:
        state.update(result)


__all__ = ["merge_returned", "run_callable"]
