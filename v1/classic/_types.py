"""The classic API's own types: `RolloutInput`, `RolloutScore(s)`, the reward-function aliases and seed 004's names.

The types both halves share (messages, `Response`, `TrajectoryStep`, outputs) live in `v1.types`.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any, Union

if sys.version_info >= (3, 11):
    from typing import TypedDict
else:
    from typing_extensions import TypedDict

from v1.types import ChatMessage, Info, Messages


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

GenerateInputs = list[dict[str, Any]]
"""Seed 004's name for the rows `generate` takes (a `datasets.Dataset` works too)."""

ProcessedOutputs = dict[str, Any]
"""Seed 004's name for processed rollout outputs (a plain dict of columns)."""

Message = Union[str, ChatMessage]
"""Seed 004's name for one message: a text (completion mode) or a chat message."""


__all__ = [
    "GenerateInputs",
    "GroupRewardFunc",
    "IndividualRewardFunc",
    "Message",
    "ProcessedOutputs",
    "RewardFunc",
    "RolloutInput",
    "RolloutScore",
    "RolloutScores",
]
