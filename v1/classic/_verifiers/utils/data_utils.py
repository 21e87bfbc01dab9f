"""``verifiers.utils.data_utils``: the example-dataset helpers and prompts environments import."""

from __future__ import annotations

from v1.classic.parsers import extract_boxed_answer, extract_hash_answer
from v1.env import load_example_dataset

THINK_BOXED_SYSTEM_PROMPT = (
    "Think step-by-step inside <think>...</think> tags.     Then, give your final answer inside \\boxed{}."
)
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

__all__ = [
    "BOXED_SYSTEM_PROMPT",
    "THINK_BOXED_SYSTEM_PROMPT",
    "extract_boxed_answer",
    "extract_hash_answer",
    "load_example_dataset",
]
