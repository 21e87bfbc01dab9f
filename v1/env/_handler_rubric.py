"""`HandlerRubric`: an environment's reward and metric handlers seen as a rubric (`env.rubric` of an `Env`).

The older trainers score through `env.rubric` (seed 003's `rubric.score_rollout(prompt=, completion=,
answer=, state=)`); this scores with the very handlers the harness runs, so their scores and a rollout's
own agree. The classic `Rubric` scores through it too: one scoring path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from v1.errors import ConfigError
from v1.rollout import Handler, Handlers, State, Task, score_group, score_rollout

_FRAMEWORK_FIELDS = frozenset(
    {"is_completed", "stop_condition", "is_truncated", "error", "trajectory", "trajectory_id", "reward", "metrics", "input"}
)
"""Fields of a caller's state the fresh one keeps its own of (managed, or the scores being computed)."""


async def _score_one(
    handlers: Sequence[Handler],
    state: State | None = None,
    *,
    prompt: Any = None,
    completion: Any = None,
    answer: Any = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score one finished rollout with `handlers`' individual functions; returns `{"reward", "metrics"}`.

    Given a v1 `State` alone, its task and completion are scored (and the scores set on it). The older
    keyword form (`completion=` given, or no v1 `State`) scores that completion on a fresh state for `prompt`,
    which keeps the given state's own fields (not its framework-managed ones) for the functions to read.
    """
    if completion is not None or not isinstance(state, State):
        task = Task({"prompt": prompt or [], "answer": answer, "info": dict(info or {})}).freeze()
        fresh = State.for_task(task)
        for key, value in dict.items(state) if isinstance(state, Mapping) else ():
            if key not in _FRAMEWORK_FIELDS and key not in State.INPUT_FIELDS:
                fresh[key] = value  # the caller's own fields (a reward function may read them)
        fresh["prompt"], fresh["completion"] = prompt, completion
        state = fresh
    await score_rollout(Handlers.collect(list(handlers)), state.task, state)
    return {"reward": state["reward"], "metrics": dict(state["metrics"])}


async def _score_group(handlers: Sequence[Handler], names: Sequence[str], states: list[State]) -> dict[str, Any]:
    """Score a group with `handlers`: individual functions per rollout, then group functions, then advantages.

    Returns `{"reward": [...], "metrics": {name: [...]}}` in the order of `states`.
    """
    collected = Handlers.collect(list(handlers))
    for state in states:
        await score_rollout(collected, state.task, state)
    await score_group(collected, [state.task for state in states], states)
    return {
        "reward": [state["reward"] for state in states],
        "metrics": {name: [state["metrics"].get(name) for state in states] for name in names},
    }


class HandlerRubric:
    """A taskset/harness pair's rewards and metrics seen as a rubric (`env.rubric` of an `Env`).

    Rewards are added to the taskset or harness (`@vf.reward`, `rewards=[...]`), not here.

    Args:
        source: returns the handlers to read (called on each use, so late additions count).
    """

    def __init__(self, source: Callable[[], Sequence[Handler]]) -> None:
        self.source = source

    def handlers(self) -> list[Handler]:
        """The reward and metric handlers, in scoring order."""
        return [handler for handler in self.source() if handler.kind in ("reward", "metric")]

    def names(self) -> list[str]:
        """The function names (the keys of `state["metrics"]`)."""
        return [handler.name for handler in self.handlers()]

    def get_reward_func_names(self) -> list[str]:
        """The function names (seed 004's name for `names`)."""
        return self.names()

    def get_reward_funcs(self) -> list[Callable[..., Any]]:
        """The functions, in scoring order (seed 004)."""
        return [handler.fn for handler in self.handlers()]

    def get_reward_weights(self) -> list[float]:
        """Their weights (metrics: 0), in the same order (seed 004)."""
        return [handler.weight if handler.kind == "reward" else 0.0 for handler in self.handlers()]

    def add_reward_func(self, func: Callable[..., Any], weight: float = 1.0) -> None:
        """Refused: the rubric is the taskset's and harness's rewards.

        Raises:
            ConfigError: always, saying where to add the reward.
        """
        raise ConfigError(
            "this environment's rubric is its taskset's and harness's rewards: add a reward there "
            "(@vf.reward on the taskset, or Harness(rewards=[...])), not to env.rubric"
        )

    def add_metric(self, func: Callable[..., Any], weight: float = 0.0) -> None:
        """Refused, as `add_reward_func`."""
        self.add_reward_func(func, weight)

    async def score_rollout(
        self,
        state: State | None = None,
        *,
        prompt: Any = None,
        completion: Any = None,
        answer: Any = None,
        info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score one finished rollout (see `_score_one`): `score_rollout(state)`, or seed 003's
        `score_rollout(prompt=..., completion=..., answer=..., state=...)`."""
        return await _score_one(self.handlers(), state, prompt=prompt, completion=completion, answer=answer, info=info)

    async def score_group(self, states: list[State]) -> dict[str, Any]:
        """Score a group of finished rollouts together (see `_score_group`)."""
        return await _score_group(self.handlers(), self.names(), states)

    async def score_rollouts(self, states: list[State]) -> None:
        """Score a group in place (seed 004's name for `score_group`)."""
        await self.score_group(states)


__all__ = ["HandlerRubric"]
