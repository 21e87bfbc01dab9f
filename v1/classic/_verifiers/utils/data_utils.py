"""``verifiers.utils.data_utils``: the example-dataset helpers and prompts environments import."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from v1.classic._parsers import extract_boxed_answer, extract_hash_answer
from v1.env import load_example_dataset as load_bundled_example_dataset

if TYPE_CHECKING:
    from datasets import Dataset

THINK_BOXED_SYSTEM_PROMPT = (
    "Think step-by-step inside <think>...</think> tags.     Then, give your final answer inside \\boxed{}."
)
BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


@functools.cache
def _example_dataset_type() -> type[Dataset]:
    from datasets import Dataset  # imported on use: it takes seconds

    class ExampleDataset(Dataset):
        """v1's bundled sample rows: `select` past their end keeps the rows there are, with a warning."""

        def select(self, indices: Iterable[int], *args: Any, **kwargs: Any) -> Dataset:
            rows = len(self)
            wanted = indices if isinstance(indices, range) else list(indices)
            kept = (
                range(wanted.start, min(wanted.stop, rows), wanted.step)
                if isinstance(wanted, range) and wanted.step > 0
                else [i for i in wanted if -rows <= i < rows]
            )
            if len(kept) < len(wanted):
                warnings.warn(
                    f"load_example_dataset: v1's bundled sample has {rows} rows; select() keeps them "
                    "(verifiers reads the whole dataset from the Hugging Face Hub)",
                    stacklevel=2,
                )
            return super().select(kept, *args, **kwargs)

    return ExampleDataset


def load_example_dataset(name: str = "gsm8k", split: str | None = None, n: int | None = None, seed: int = 0) -> Dataset:
    """verifiers' `load_example_dataset` over v1's bundled sample rows (`v1.load_example_dataset`).

    Code written for the Hub datasets selects ranges of their size (``.select(range(1000))``): past
    the bundled rows, `select` keeps the rows there are and warns.
    """
    bundled = load_bundled_example_dataset(name, split, n, seed).flatten_indices()
    return _example_dataset_type()(bundled.data, info=bundled.info, split=bundled.split)


__all__ = [
    "BOXED_SYSTEM_PROMPT",
    "THINK_BOXED_SYSTEM_PROMPT",
    "extract_boxed_answer",
    "extract_hash_answer",
    "load_example_dataset",
]
