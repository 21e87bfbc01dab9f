"""The sampling distribution: logits divided by the temperature, then top-k and top-p filtering.

The built-in engine samples from this distribution and reports its log-probabilities (vLLM's
``processed_logprobs``); the trainer recomputes the same quantity with the same settings, so
the importance ratio and the gradient are those of the policy that actually sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class LogitProcessing:
    """How raw logits become the sampling distribution. ``temperature <= 0`` (greedy) means no scaling."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    @classmethod
    def from_sampling_args(cls, args: Mapping[str, Any]) -> LogitProcessing:
        """The distribution OpenAI-style sampling args ask for (missing: temperature 1, no filtering).

        Raises:
            ValueError: temperature, top_p or top_k is not a number in its range.
        """
        try:
            temperature = float(args.get("temperature", 1.0))
            top_p = float(args.get("top_p", 1.0))
            top_k = int(args.get("top_k", 0))
        except (TypeError, ValueError):
            raise ValueError("temperature and top_p must be numbers, top_k an integer") from None
        if not 0.0 <= temperature < math.inf or not 0.0 < top_p <= 1.0 or top_k < -1:
            raise ValueError(f"temperature {temperature} must be >= 0, top_p {top_p} in (0, 1], top_k {top_k} >= -1")
        return cls(temperature, top_p, max(top_k, 0))

    @property
    def scale(self) -> float:
        return self.temperature if self.temperature > 0 else 1.0

    @property
    def filters(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0


def processed_logits(logits: torch.Tensor, processing: LogitProcessing, keep: torch.Tensor | None = None) -> torch.Tensor:
    """`logits` (``[..., V]``) divided by the temperature, with tokens outside top-k / top-p at ``-inf``.

    Args:
        logits: raw logits, last dimension the vocabulary.
        processing: temperature, top-p and top-k.
        keep: ``[...]`` token ids never filtered out (the sampled tokens, when a trainer recomputes
            them with weights that moved: their log-probability stays finite).
    """
    scaled = logits / processing.scale if processing.scale != 1.0 else logits
    if not processing.filters:
        return scaled
    with torch.no_grad():
        removed = torch.zeros_like(scaled, dtype=torch.bool)
        if processing.top_k > 0:
            kth = torch.topk(scaled, min(processing.top_k, scaled.shape[-1]), dim=-1).values[..., -1:]
            removed |= scaled < kth
        if processing.top_p < 1.0:
            probs = torch.softmax(scaled.masked_fill(removed, float("-inf")), dim=-1)
            sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
            outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > processing.top_p
            removed |= torch.zeros_like(removed).scatter(-1, order, outside)
        if keep is not None:
            removed.scatter_(-1, keep.unsqueeze(-1), False)
    return scaled.masked_fill(removed, float("-inf"))


def sample_from_logprobs(log_probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of `log_probs` (``[B, V]``) by inverse transform: the token whose cumulative
    probability first exceeds ``uniforms[b] * total`` (`uniforms`: ``[B]`` in ``[0, 1)``).

    Exact for the row's distribution up to float64, one batched operation for the whole batch
    (each row's uniform comes from its own seeded generator). A token of probability 0 (filtered
    by top-k or top-p) is never returned.
    """
    probs = log_probs.double().exp()
    cdf = probs.cumsum(dim=-1)
    targets = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(1)
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(1).clamp(max=log_probs.shape[-1] - 1)
    impossible = probs.gather(1, tokens.unsqueeze(1)).squeeze(1) == 0  # a target rounded up to the total
    if bool(impossible.any()):
        tokens[impossible] = probs[impossible].argmax(dim=-1)
    return tokens


def entropy_of(log_probs: torch.Tensor) -> torch.Tensor:
    """The entropy of each distribution in `log_probs` (``[..., V]``; ``-inf`` entries have probability 0)."""
    probs = log_probs.exp()
    return -(probs * log_probs.masked_fill(probs == 0, 0.0)).sum(-1)


__all__ = ["LogitProcessing", "entropy_of", "processed_logits", "sample_from_logprobs"]
