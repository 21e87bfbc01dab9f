"""Scoring: rewards and metrics per rollout and per group, then advantages."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from v1._util.exact_sum import ExactSum
from v1.rollout._lifecycle import Handler, Handlers, group_arguments, rollout_arguments

if TYPE_CHECKING:
    from v1.rollout._state import State
    from v1.rollout._task import Task


def _as_float(value: Any, handler: Handler) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{handler.kind} {handler.name!r} returned {value!r}; expected a finite number")
    return float(value)


def _finite(value: float, state: State, what: str) -> float:
    """`value` when finite; else 0.0, with the error recorded (finite terms can sum past the float range)."""
    if math.isfinite(value):
        return value
    state.record_error(OverflowError(f"the {what} is out of the float range (its weighted terms sum to {value})"), what)
    return 0.0


async def score_rollout(handlers: Handlers, task: Task, state: State) -> None:
    """Per-rollout rewards and metrics -> `state["metrics"]`, `state["reward"]` (weighted sum).

    A failing function scores 0.0 and records its error on the state.
    """
    metrics: dict[str, float] = dict(state.get("metrics") or {})
    reward = 0.0
    scorers = handlers.of("reward", group=False) + handlers.of("metric", group=False)
    arguments = rollout_arguments(task, state) if scorers else {}
    for handler in scorers:
        try:
            value = _as_float(await handler.call(arguments), handler)
        except Exception as exc:
            state.record_error(exc, f"{handler.kind}:{handler.name}")
            value = 0.0
        metrics[handler.name] = value
        reward += handler.weight * value
    state["metrics"] = metrics
    state["reward"] = _finite(reward, state, "reward")


async def score_group(handlers: Handlers, tasks: list[Task], states: list[State]) -> None:
    """Group rewards and metrics (one value per state), then advantages.

    The default advantage is each reward minus the group's mean reward.
    """
    arguments = group_arguments(tasks, states)
    for handler in handlers.of("reward", group=True) + handlers.of("metric", group=True):
        try:
            values = await handler.call(arguments)
            if not isinstance(values, (list, tuple)) or len(values) != len(states):
                raise TypeError(
                    f"group {handler.kind} {handler.name!r} must return {len(states)} values (one per state), got {values!r:.80}"
                )
            floats = [_as_float(v, handler) for v in values]
        except Exception as exc:
            for state in states:
                state.record_error(exc, f"{handler.kind}:{handler.name}")
            floats = [0.0] * len(states)
        for state, value in zip(states, floats):
            state["metrics"] = {**(state.get("metrics") or {}), handler.name: value}
            state["reward"] = _finite((state.get("reward") or 0.0) + handler.weight * value, state, "reward")
    advantage_handlers = handlers.of("advantage")
    if advantage_handlers:
        handler = advantage_handlers[0]
        try:
            values = await handler.call(arguments)
            if not isinstance(values, (list, tuple)) or len(values) != len(states):
                raise TypeError(f"advantage {handler.name!r} must return {len(states)} values, got {values!r:.80}")
            advantages = [_as_float(v, handler) for v in values]
        except Exception as exc:
            for state in states:
                state.record_error(exc, f"advantage:{handler.name}")
            advantages = [0.0] * len(states)
    else:
        total = ExactSum()
        for state in states:
            total.add(state.get("reward") or 0.0)
        mean = total.mean(len(states))
        advantages = [(state.get("reward") or 0.0) - mean for state in states]
    for state, value in zip(states, advantages):
        state["advantage"] = _finite(value, state, "advantage")
        for step in state["trajectory"]:
            step["reward"] = state.get("reward")
            step["advantage"] = value


__all__ = ["score_group", "score_rollout"]
