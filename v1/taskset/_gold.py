"""Gold programs for tasks whose answer is a field of the row: what `v1 validate` runs instead of the model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from v1.errors import TaskError
from v1.rollout import State, Task


def answer_gold(template: str = "{answer}") -> Callable[[Task, State], Awaitable[dict[str, Any]]]:
    """A gold program that replies with the task's own answer, as one assistant message.

    Args:
        template: the reply, `str.format`-ed with the task's fields (``"\\\\boxed{{{answer}}}"`` for a
            boxed answer, ``"{info[solution]}"`` for a nested field).

    The reply becomes the rollout's `completion`, which the taskset's rewards then score as
    they would a model's. A task without the field fails its gold run, naming the field.
    """

    async def gold(task: Task, state: State) -> dict[str, Any]:
        try:
            reply = template.format_map(task)
        except (KeyError, IndexError) as exc:
            raise TaskError(f"gold: the task has no field {exc} for the reply {template!r}") from None
        return {"completion": [{"role": "assistant", "content": reply}]}

    gold.__name__ = gold.__qualname__ = "answer_gold"
    return gold


__all__ = ["answer_gold"]
