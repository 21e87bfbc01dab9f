"""Samples that begin with the same tokens (a group's rollouts of one prompt) run those tokens once.

A micro-batch is laid out as its distinct prefixes, right-padded ``[U, P]``, and each sample's
own tokens after its prefix, right-padded ``[N, S]``. The model runs the prefixes once; their
key/value cache, gathered once per sample (so every sample's gradient flows back into its
prefix's), is what each sample's tokens attend to, at positions that continue the prefix. A
sample's prefix ends just before the token that predicts its first loss token, so the second
pass computes every prediction the loss reads. In a GRPO group of 8 rollouts of one prompt the
prompt runs once instead of 8 times; the log-probabilities and gradients are those of one
forward over each whole sample (tests compare both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from v1.train._batch import Sample, micro_batches

MAX_COST = 0.8
"""The layout is used when it runs at most this share of the tokens the padded layout would."""


def shared_prefix_length(sample: Sample) -> int:
    """How many leading tokens of `sample` no loss prediction needs to run itself (0: none)."""
    try:
        first_loss = sample.loss_mask.index(1)
    except ValueError:
        return 0
    return max(first_loss - 1, 0)


def micro_batches_by_prefix(samples: Sequence[Sample], micro_batch_size: int) -> list[list[Sample]]:
    """Micro-batches of at most `micro_batch_size` with samples of one prefix side by side (fewer distinct prefixes per batch)."""

    def key(sample: Sample) -> tuple[int, list[int], int]:
        length = shared_prefix_length(sample)
        return length, sample.input_ids[:length], len(sample.input_ids)

    ordered = sorted(samples, key=key)
    return [ordered[start : start + micro_batch_size] for start in range(0, len(ordered), micro_batch_size)]


def padded_positions(samples: Sequence[Sample]) -> int:
    """Token positions the padded layout of `samples` runs."""
    return len(samples) * max((len(sample.input_ids) for sample in samples), default=0)


def shared_positions(samples: Sequence[Sample]) -> int | None:
    """Token positions the shared-prefix layout of `samples` runs, or None when a sample has no prefix."""
    lengths = [shared_prefix_length(sample) for sample in samples]
    if not samples or min(lengths) < 1:
        return None
    prefixes = {tuple(sample.input_ids[:length]) for sample, length in zip(samples, lengths)}
    longest_suffix = max(len(sample.input_ids) - length for sample, length in zip(samples, lengths))
    return len(prefixes) * max(lengths) + len(samples) * longest_suffix


def positions_run(chunks: Sequence[Sequence[Sample]], max_cost: float = MAX_COST) -> int:
    """Token positions a step's micro-batches run, each in the layout the trainer would pick for it."""
    total = 0
    for chunk in chunks:
        padded, shared = padded_positions(chunk), shared_positions(chunk)
        total += shared if shared is not None and shared <= max_cost * padded else padded
    return total


def plan_micro_batches(samples: Sequence[Sample], micro_batch_size: int) -> list[list[Sample]]:
    """Micro-batches that keep prompts together, or by length (less padding), whichever runs fewer token positions.

    Grouping by prompt pays when prompts are a large part of each sample (short answers); with
    long, varied completions, batching similar lengths saves more padding than the prompts cost.
    """
    by_prefix = micro_batches_by_prefix(samples, micro_batch_size)
    by_length = micro_batches(samples, micro_batch_size)
    return by_prefix if positions_run(by_prefix) < sum(map(padded_positions, by_length)) else by_length


@dataclass
class SharedPrefixBatch:
    """A micro-batch as distinct prefixes and per-sample suffixes.

    ``prefix_ids``/``prefix_mask`` ``[U, P]``; ``owner`` ``[N]``: each sample's prefix row;
    ``suffix_ids``/``position_ids`` ``[N, S]``; ``attention_mask`` ``[N, P + S]`` (prefix then
    suffix); ``targets``/``where`` ``[N, S - 1]``: what suffix position `j` predicts and whether
    the loss reads it; ``index`` ``[N, S - 1]``: that prediction's flat position in the padded
    ``[N, width]`` layout of `collate` (``width`` = longest sample - 1).
    """

    prefix_ids: torch.Tensor
    prefix_mask: torch.Tensor
    owner: torch.Tensor
    suffix_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    where: torch.Tensor
    index: torch.Tensor
    width: int

    def to(self, device: torch.device) -> SharedPrefixBatch:
        tensors = {name: getattr(self, name).to(device) for name in self.__dataclass_fields__ if name != "width"}
        return SharedPrefixBatch(**tensors, width=self.width)


def shared_prefix_batch(samples: Sequence[Sample], pad_id: int = 0, max_cost: float = MAX_COST) -> SharedPrefixBatch | None:
    """The shared-prefix layout of `samples`, or None when a sample has no prefix or it would save too little.

    Too little: the layout would run more than `max_cost` of the padded layout's tokens.
    """
    shared = shared_positions(samples)
    if shared is None or shared > max_cost * padded_positions(samples):
        return None
    lengths = [shared_prefix_length(sample) for sample in samples]
    rows: dict[tuple[int, ...], int] = {}
    owner = [rows.setdefault(tuple(sample.input_ids[:length]), len(rows)) for sample, length in zip(samples, lengths)]
    prefixes = list(rows)
    longest_prefix = max(map(len, prefixes))
    suffixes = [sample.input_ids[length:] for sample, length in zip(samples, lengths)]
    longest_suffix = max(map(len, suffixes))
    longest = max(len(sample.input_ids) for sample in samples)

    def padded(values: Sequence[int], width: int, fill: int) -> list[int]:
        return [*values, *[fill] * (width - len(values))]

    prefix_mask = [padded([1] * len(prefix), longest_prefix, 0) for prefix in prefixes]
    width = longest - 1
    where, index = [], []
    for row, (sample, length) in enumerate(zip(samples, lengths)):
        predictions = len(sample.input_ids) - 1 - length
        where.append(padded([value > 0 for value in sample.loss_mask[length + 1 :]], longest_suffix - 1, 0))
        index.append(padded([row * width + length + j for j in range(predictions)], longest_suffix - 1, 0))
    suffix_ids = torch.tensor([padded(suffix, longest_suffix, pad_id) for suffix in suffixes], dtype=torch.long)
    suffix_mask = [padded([1] * len(suffix), longest_suffix, 0) for suffix in suffixes]
    return SharedPrefixBatch(
        prefix_ids=torch.tensor([padded(prefix, longest_prefix, pad_id) for prefix in prefixes], dtype=torch.long),
        prefix_mask=torch.tensor(prefix_mask, dtype=torch.long),
        owner=torch.tensor(owner, dtype=torch.long),
        suffix_ids=suffix_ids,
        position_ids=torch.tensor([[length + j for j in range(longest_suffix)] for length in lengths], dtype=torch.long),
        attention_mask=torch.tensor([prefix_mask[row] + mask for row, mask in zip(owner, suffix_mask)], dtype=torch.long),
        targets=suffix_ids[:, 1:],
        where=torch.tensor(where, dtype=torch.bool),
        index=torch.tensor(index, dtype=torch.long),
        width=width,
    )


__all__ = [
    "MAX_COST",
    "SharedPrefixBatch",
    "micro_batches_by_prefix",
    "padded_positions",
    "plan_micro_batches",
    "positions_run",
    "shared_positions",
    "shared_prefix_batch",
    "shared_prefix_length",
]
