"""The classic API's own types: `RolloutInput`, `RolloutScore(s)` and the reward-function aliases.

The types both halves share (messages, `Response`, `TrajectoryStep`, outputs) live in `v1.types`.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Union

if sys.version_info >= (3, 11):
    from typing import TypedDict
else:
    from typing_extensions import TypedDict

from v1.types import Info, Messages


class _RolloutInputRequired(TypedDict):
    prompt: Messages
    example_id: int


class RolloutInput(_RolloutInputRequired, total=False):
    """One rollout's input, as the classic API passes it (`prompt` and `example_id` required)."""

    answer: str
    info: Info


class RolloutScore(TypedDict):
    """The score of one rollout: the weighted reward and every function's value."""

    reward: float
    metrics: dict[str, float]


class RolloutScores(TypedDict):
    """The scores of several rollouts, in their order."""

    reward: list[float]
    metrics: dict[str, list[float]]


IndividualRewardFunc = Callable[..., Union[float, Awaitable[float]]]
"""Scores one rollout (its arguments are injected by name: prompt, completion, answer, state, ...)."""

GroupRewardFunc = Callable[..., Union[list[float], Awaitable[list[float]]]]
"""Scores the rollouts of one example together (plural argument names: completions, answers, states, ...)."""

RewardFunc = Union[IndividualRewardFunc, GroupRewardFunc]


__all__ = ["GroupRewardFunc", "IndividualRewardFunc", "RewardFunc", "RolloutInput", "RolloutScore", "RolloutScores"]
