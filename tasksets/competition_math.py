"""competition_math: competition-style problems with LaTeX answers in ``\\boxed{}``, checked by `math-verify`.

Rows come from a JSONL file in the layout of the MATH dataset (`problem`, a `solution`
ending in ``\\boxed{answer}``, `level`, `type`), loaded with `datasets.load_dataset`.
A small hand-written sample ships in `tasksets/data/competition_math.jsonl`. (Its env id
is not `math`, which would name Python's own module.) `tasksets.math_python` is the same
taskset with a sandboxed Python tool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import v1 as vf
from tasksets.math_answers import correct_answer

DATA = Path(__file__).parent / "data" / "competition_math.jsonl"
SYSTEM_PROMPT = "Solve the problem. Put the final answer, in simplest form, in \\boxed{}."


def load_rows(data_files: str | Path = DATA) -> list[dict[str, Any]]:
    """Rows with `question` (the problem), `answer` (the boxed answer of the solution) and `info` (level, type)."""
    from datasets import load_dataset  # imported on use: it takes seconds

    dataset = load_dataset("json", data_files=str(data_files), split="train")
    return [
        {
            "question": row["problem"],
            "answer": vf.extract_boxed_answer(row["solution"], strict=True),
            "info": {"level": row.get("level"), "type": row.get("type")},
        }
        for row in dataset
    ]


DEFAULTS: dict[str, Any] = {
    "taskset_id": "competition_math",
    "source": "tasksets.competition_math:load_rows",
    "eval_source": "tasksets.competition_math:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "rewards": [{"fn": "tasksets.math_answers:correct_answer", "weight": 1.0}],
    "gold": "tasksets.math_answers:gold",
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The competition_math taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SYSTEM_PROMPT", "correct_answer", "load_rows", "load_taskset"]
