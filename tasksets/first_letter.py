"""first_letter: answer with the first letter of a three-letter string (an easy RL taskset for tiny models).

Prompts are the 512 strings of three letters from ``a``-``h``; a fixed shuffle puts
400 in the training split and holds out the other 112 for evaluation, so a policy is
scored on strings it never trained on. The reward is 1.0 for exactly the first letter.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import v1 as vf

LETTERS = "abcdefgh"
TRAIN_SIZE = 400


def _strings() -> list[str]:
    strings = ["".join(letters) for letters in itertools.product(LETTERS, repeat=3)]
    random.Random(0).shuffle(strings)
    return strings


def train_rows() -> list[dict[str, Any]]:
    """The training split: `question` (three letters) and `answer` (the first)."""
    return [{"question": text, "answer": text[0]} for text in _strings()[:TRAIN_SIZE]]


def eval_rows() -> list[dict[str, Any]]:
    """The held-out split (strings not in the training split)."""
    return [{"question": text, "answer": text[0]} for text in _strings()[TRAIN_SIZE:]]


def first_letter(completion: list[dict[str, Any]], answer: str) -> float:
    """1.0 when the last assistant message is exactly the answer (surrounding whitespace ignored)."""
    replies = [m for m in completion if m.get("role") == "assistant"]
    text = (replies[-1].get("content") or "").strip() if replies else ""
    return float(text == answer)


gold = vf.answer_gold()
"""The gold solution: the first letter (`v1 validate first_letter`)."""

DEFAULTS: dict[str, Any] = {
    "taskset_id": "first_letter",
    "source": "tasksets.first_letter:train_rows",
    "eval_source": "tasksets.first_letter:eval_rows",
    "rewards": [{"fn": "tasksets.first_letter:first_letter", "weight": 1.0}],
    "gold": "tasksets.first_letter:gold",
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The first_letter taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "LETTERS", "eval_rows", "first_letter", "gold", "load_taskset", "train_rows"]
