"""reverse_text: reverse a short string, scored by similarity to the exact reversal.

A small local sample ships in `tasksets/data/reverse_text.jsonl`, so the
taskset works offline.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import v1 as vf

DATA = Path(__file__).parent / "data" / "reverse_text.jsonl"
SYSTEM_PROMPT = "Reverse the user's text character by character. Answer with the reversed text only."


def load_rows() -> list[dict[str, Any]]:
    """The local sample: rows with `question` (the text) and `answer` (its reversal)."""
    with DATA.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def similarity(completion: list[dict[str, Any]], answer: str) -> float:
    """How close the last assistant message is to the answer (difflib ratio, 0..1)."""
    replies = [m for m in completion if m.get("role") == "assistant"]
    text = (replies[-1].get("content") or "").strip() if replies else ""
    return difflib.SequenceMatcher(None, text, answer).ratio()


def exact(completion: list[dict[str, Any]], answer: str) -> float:
    """1.0 for an exact reversal."""
    return float(similarity(completion, answer) == 1.0)


gold = vf.answer_gold()
"""The gold solution: the exact reversal (`v1 validate reverse_text`)."""

DEFAULTS: dict[str, Any] = {
    "taskset_id": "reverse_text",
    "source": "tasksets.reverse_text:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "rewards": [{"fn": "tasksets.reverse_text:similarity", "weight": 1.0}],
    "metrics": [{"fn": "tasksets.reverse_text:exact"}],
    "gold": "tasksets.reverse_text:gold",
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The reverse_text taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SYSTEM_PROMPT", "exact", "gold", "load_rows", "load_taskset", "similarity"]
