"""gsm8k: grade-school word problems; the answer is checked for math equivalence by `math-verify`.

Rows come from a JSONL file in GSM8K's layout (`question`, and an `answer` that ends
in ``#### N``), loaded with `datasets.load_dataset`. A small hand-written sample ships
in `tasksets/data/gsm8k.jsonl`; point `data_files` at the real GSM8K files to use them.
The model may answer in ``\\boxed{}`` or after ``####``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import v1 as vf
from tasksets.math_answers import correct_answer

DATA = Path(__file__).parent / "data" / "gsm8k.jsonl"
SYSTEM_PROMPT = "Solve the problem step by step. Give the final answer as a number in \\boxed{}."


def load_rows(data_files: str | Path = DATA) -> list[dict[str, Any]]:
    """GSM8K rows: `question`, `answer` (the number after ``####``) and `info.solution` (the worked solution)."""
    from datasets import load_dataset  # imported on use: it takes seconds

    dataset = load_dataset("json", data_files=str(data_files), split="train")
    return [
        {"question": row["question"], "answer": vf.extract_hash_answer(row["answer"]) or "", "info": {"solution": row["answer"]}}
        for row in dataset
    ]


DEFAULTS: dict[str, Any] = {
    "taskset_id": "gsm8k",
    "source": "tasksets.gsm8k:load_rows",
    "eval_source": "tasksets.gsm8k:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "rewards": [{"fn": "tasksets.math_answers:correct_answer", "weight": 1.0}],
    "gold": "tasksets.math_answers:gold",
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The gsm8k taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SYSTEM_PROMPT", "correct_answer", "load_rows", "load_taskset"]
