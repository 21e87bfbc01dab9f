"""Micro-batches by a token budget: several samples packed into one row, attention kept within each.

A packed row is the samples' tokens one after the other with position ids that restart at 0
for each sample; with no attention mask, transformers reads sample boundaries from the
position ids and never lets attention cross them (a test checks packed log-probabilities
against one forward per sample). `PackedRow.index` maps the row's predictions back to the
padded ``[samples, length - 1]`` layout of `collate`, so the loss sees the same tensors
either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from v1.train._batch import Sample


@dataclass
class PackedRow:
    """One row of packed samples: ``input_ids``/``position_ids`` ``[1, N]``, ``targets`` ``[1, N - 1]``,
    and ``index`` ``[samples, width - 1]``: where each sample's prediction `j` is among the row's."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    index: torch.Tensor

    def to(self, device: torch.device) -> PackedRow:
        return PackedRow(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """A ``[1, N - 1]`` per-prediction tensor of the row in the ``[samples, width - 1]`` layout (padding: the first value)."""
        return values[0][self.index]


def pack_by_tokens(samples: Sequence[Sample], max_tokens: int) -> list[list[Sample]]:
    """Samples in bins of at most `max_tokens` tokens (first fit, longest first; a longer sample is a bin of its own)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, not {max_tokens}")
    bins: list[list[Sample]] = []
    loads: list[int] = []
    for sample in sorted(samples, key=lambda item: len(item.input_ids), reverse=True):
        size = len(sample.input_ids)
        for number, load in enumerate(loads):
            if load + size <= max_tokens:
                bins[number].append(sample)
                loads[number] += size
                break
        else:
            bins.append([sample])
            loads.append(size)
    return bins


def packed_row(samples: Sequence[Sample]) -> PackedRow:
    """`samples` packed into one row (the order of `collate`'s rows)."""
    ids: list[int] = []
    positions: list[int] = []
    width = max(len(sample.input_ids) for sample in samples)
    index = torch.zeros(len(samples), width - 1, dtype=torch.long)
    for row, sample in enumerate(samples):
        start, length = len(ids), len(sample.input_ids)
        ids.extend(sample.input_ids)
        positions.extend(range(length))
        index[row, : length - 1] = torch.arange(start, start + length - 1)
    tensor = torch.tensor([ids], dtype=torch.long)
    return PackedRow(tensor, torch.tensor([positions], dtype=torch.long), tensor[:, 1:], index)


__all__ = ["PackedRow", "pack_by_tokens", "packed_row"]
