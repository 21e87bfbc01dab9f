"""The loss family on completion tokens: the policy-gradient objectives GRPO, DAPO-style token-level
normalisation and CISPO, and SFT's negative log-likelihood (``kind = "sft"``: `v1 sft` and the warm-up).

Every loss sees the same tensors: the trainer's log-probabilities of the sampled
tokens (`logprobs`, with grad), the inference server's log-probabilities of the same
tokens (`inference_logprobs`: the behaviour policy, so the importance ratio
`exp(logprobs - inference_logprobs)` also corrects for off-policy staleness),
per-token `advantages` and a `loss_mask` that is 1 on completion tokens only. SFT's objective
reads only the log-probabilities: it learns the tokens as they are, token-normalised.

Normalisation decides what one token weighs:

- ``"sequence"`` (GRPO): the mean over each sequence's loss tokens, then the mean
  over sequences: a long answer weighs as much as a short one.
- ``"token"`` (DAPO, CISPO): the sum over every loss token of the step divided by
  their count: each token weighs the same.

With gradient accumulation the denominators are the whole step's (`total_tokens`,
`total_sequences`), so splitting a step into micro-batches does not change its gradient.

Two options change the ratio (both as TRL 1.16 computes them; formulas in docs/training.md):

- ``importance_sampling_level = "sequence"`` (GSPO): one ratio per sequence, the exponential of
  the mean log-ratio over its loss tokens, clipped and applied to every token of the sequence.
- ``sampler_correction`` (TIS/MIS): the clipped ratio is taken against the trainer's own
  log-probabilities before the step's first update (`old_logprobs`), and each token's loss is
  multiplied by the sampler weight ``exp(old_logprobs - inference_logprobs)`` (per token, or
  per sequence from the summed log-ratio), truncated to ``[sampler_cap_min, sampler_cap]`` or
  set to 0 outside it: the sampler/trainer mismatch is corrected apart from the clip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import Field, model_validator

from v1.config import Config

if TYPE_CHECKING:
    import torch

LossKind = Literal["grpo", "dapo", "cispo", "sft"]
Normalization = Literal["sequence", "token"]
RewardScaling = Literal["none", "group", "batch"]
ImportanceSamplingLevel = Literal["token", "sequence"]
SamplerCorrection = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


class LossConfig(Config):
    """Which loss and its clipping, normalisation and KL settings.

    Args:
        kind: ``grpo`` (clipped ratio, per-sequence mean), ``dapo`` (clipped ratio with a higher
            upper clip, token-level mean) or ``cispo`` (clipped importance weight, stop-gradient,
            times the log-probability; token-level mean); ``sft`` (the negative log-likelihood of the
            loss tokens, token-level mean: what `v1 sft` and the SFT warm-up train with, which choose it
            themselves; an RL run's loss is one of the other three).
        clip_low: the ratio's lower clip is ``1 - clip_low`` (grpo, dapo).
        clip_high: the ratio's upper clip is ``1 + clip_high``; None: 0.2 for grpo, 0.28 for dapo,
            4.0 for cispo (where it bounds the importance weight).
        normalization: ``sequence`` or ``token``; None: the kind's own (grpo: sequence, else token).
        kl_coef: weight of the k3 KL estimate to the reference policy (0: no reference model).
        scale_rewards: divide each rollout's advantage (the environment's: reward minus the group
            mean by default, Dr. GRPO style) by the sample (n - 1, as TRL) standard deviation of its group's rewards
            (``group``, GRPO's original normalisation) or of the step's (``batch``), plus 1e-4;
            ``none`` (every loss kind's default) leaves it as it is.
        importance_sampling_level: ``token`` (one ratio per token) or ``sequence`` (GSPO: the
            exponential of each sequence's mean log-ratio, for all its tokens).
        sampler_correction: ``none`` (the ratio is against the sampler's logprobs, as recorded), or
            TIS/MIS on the sampler-vs-trainer ratio: ``token_truncate``, ``token_mask``,
            ``sequence_truncate``, ``sequence_mask`` (TRL's `vllm_importance_sampling_mode` values).
        sampler_cap: the sampler weight's upper bound (truncated to it, or masked above it).
        sampler_cap_min: its lower bound (None: none).
        mask_truncated_completions: a rollout cut by a token limit (a turn that ended on
            ``max_tokens``, or the context reaching ``max_seq_len``) carries no loss.
    """

    kind: LossKind = "grpo"
    clip_low: float = Field(0.2, ge=0.0, le=1.0)
    clip_high: float | None = Field(None, ge=0.0)
    normalization: Normalization | None = None
    kl_coef: float = Field(0.0, ge=0.0)
    scale_rewards: RewardScaling = "none"
    importance_sampling_level: ImportanceSamplingLevel = "token"
    sampler_correction: SamplerCorrection = "none"
    sampler_cap: float = Field(3.0, gt=0.0)
    sampler_cap_min: float | None = Field(None, ge=0.0)
    mask_truncated_completions: bool = False

    @model_validator(mode="after")
    def _sampler_bounds_in_order(self) -> LossConfig:
        if self.sampler_cap_min is not None and self.sampler_cap_min >= self.sampler_cap:
            raise ValueError(f"sampler_cap_min ({self.sampler_cap_min}) must be below sampler_cap ({self.sampler_cap})")
        return self

    @property
    def upper_clip(self) -> float:
        """`clip_high`, or the kind's default."""
        if self.clip_high is not None:
            return self.clip_high
        return {"grpo": 0.2, "dapo": 0.28, "cispo": 4.0, "sft": 0.0}[self.kind]

    @property
    def token_normalized(self) -> bool:
        """Whether every loss token of the step weighs the same."""
        return (self.normalization or ("sequence" if self.kind == "grpo" else "token")) == "token"

    @property
    def policy_gradient(self) -> bool:
        """Whether the objective weighs tokens by the policy's ratio to the sampler (grpo, dapo, cispo; not sft)."""
        return self.kind != "sft"


@dataclass
class LossResult:
    """The scalar to back-propagate and detached statistics (sums over loss tokens, for averaging)."""

    loss: torch.Tensor
    clipped_tokens: float
    loss_tokens: float
    ratio_sum: float
    kl_sum: float
    sampler_weight_sum: float = 0.0
    sampler_bounded_tokens: float = 0.0

    def sums(self) -> dict[str, float]:
        """The statistics by the names `update_statistics` reads them."""
        return {
            "clipped": self.clipped_tokens,
            "ratio": self.ratio_sum,
            "kl": self.kl_sum,
            "sampler_weight": self.sampler_weight_sum,
            "sampler_bounded": self.sampler_bounded_tokens,
        }


class TokenObjective(Protocol):
    """A per-token loss (to be masked and normalised) and a per-token 'clip was active' flag."""

    def __call__(
        self, logprobs: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, config: LossConfig
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def clipped_ratio_objective(
    logprobs: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, config: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO: ``-min(r * A, clip(r, 1 - low, 1 + high) * A)``; clipped where the clipped term is the smaller."""
    import torch

    clipped = torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.upper_clip)
    unclipped_term = ratio * advantages
    clipped_term = clipped * advantages
    return -torch.minimum(unclipped_term, clipped_term), (clipped_term < unclipped_term)


def cispo_objective(
    logprobs: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, config: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO: ``-sg(min(r, 1 + high)) * A * logprob``: every token keeps a gradient, its weight is bounded."""
    import torch

    weight = torch.clamp(ratio, max=1.0 + config.upper_clip).detach()
    return -weight * advantages * logprobs, ratio > 1.0 + config.upper_clip


def nll_objective(
    logprobs: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, config: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """SFT: ``-logprob`` of every loss token (no ratio, no advantage, nothing clipped)."""
    import torch

    return -logprobs, torch.zeros_like(logprobs, dtype=torch.bool)


OBJECTIVES: dict[str, TokenObjective] = {
    "grpo": clipped_ratio_objective,
    "dapo": clipped_ratio_objective,
    "cispo": cispo_objective,
    "sft": nll_objective,
}


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, 1]``: each row's mean of `values` over its mask (0 for a row with none)."""
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0))[:, None]


def log_importance_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: ImportanceSamplingLevel) -> torch.Tensor:
    """The log of the clipped ratio: per token (``[B, T]``), or each sequence's mean log-ratio (GSPO, ``[B, 1]``)."""
    return log_ratio if level == "token" else sequence_mean(log_ratio, mask)


def sampler_weights(
    old_logprobs: torch.Tensor, inference_logprobs: torch.Tensor, mask: torch.Tensor, config: LossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """TIS/MIS: the weight ``exp(old - inference)`` bounded as `config.sampler_correction` says, and where
    the bound acted (truncated or masked). ``[B, T]`` at token level, ``[B, 1]`` at sequence level (the
    summed log-ratio, as TRL sums it)."""
    import torch

    mode = config.sampler_correction
    log_ratio = torch.nan_to_num((old_logprobs - inference_logprobs) * mask, nan=0.0)
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=1, keepdim=True)
    weight = torch.exp(log_ratio)
    low = config.sampler_cap_min if config.sampler_cap_min is not None else 0.0
    outside = (weight > config.sampler_cap) | (weight < low)
    if mode.endswith("truncate"):
        return weight.clamp(min=low, max=config.sampler_cap), outside
    return weight.masked_fill(outside, 0.0), outside


def policy_loss(
    logprobs: torch.Tensor,
    inference_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: LossConfig,
    *,
    ref_logprobs: torch.Tensor | None = None,
    old_logprobs: torch.Tensor | None = None,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
) -> LossResult:
    """The loss of one (micro-)batch, normalised by the step's totals.

    Args:
        logprobs: ``[B, T]`` log-probabilities of the sampled tokens under the trained policy.
        inference_logprobs: ``[B, T]`` the same tokens' log-probabilities reported by the server.
        advantages: ``[B, T]`` (or ``[B]``, broadcast over tokens).
        loss_mask: ``[B, T]``, 1 where a token carries loss (completion tokens), else 0.
        config: the loss settings.
        ref_logprobs: ``[B, T]`` under the reference policy, required when ``config.kl_coef > 0``.
        old_logprobs: ``[B, T]`` the trainer's before the step's first update, required when
            ``config.sampler_correction`` is not ``none``.
        total_tokens: loss tokens in the whole step (token normalisation); this batch's when None.
        total_sequences: sequences with loss tokens in the whole step (sequence normalisation).
    """
    import torch

    mask = loss_mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    correcting = config.sampler_correction != "none"
    if correcting and old_logprobs is None:
        raise ValueError(f"sampler_correction = {config.sampler_correction!r} needs old_logprobs")
    baseline = old_logprobs if correcting and old_logprobs is not None else inference_logprobs
    ratio = torch.exp(log_importance_weights(logprobs - baseline, mask, config.importance_sampling_level)).expand_as(logprobs)
    per_token, clipped = OBJECTIVES[config.kind](logprobs, ratio, advantages, config)
    weight = bounded = torch.zeros_like(logprobs)
    if correcting:
        weight, bounded = (part.expand_as(logprobs) for part in sampler_weights(baseline, inference_logprobs, mask, config))
        per_token = per_token * weight
    kl = torch.zeros_like(logprobs)
    if config.kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        log_ratio = ref_logprobs - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        per_token = per_token + config.kl_coef * kl
    token_count = mask.sum(dim=1)
    if config.token_normalized:
        denominator = total_tokens if total_tokens is not None else float(token_count.sum().item())
        loss = (per_token * mask).sum() / max(denominator, 1.0)
    else:
        sequences = total_sequences if total_sequences is not None else float((token_count > 0).sum().item())
        per_sequence = (per_token * mask).sum(dim=1) / token_count.clamp(min=1.0)
        loss = per_sequence.sum() / max(sequences, 1.0)
    with torch.no_grad():
        return LossResult(
            loss=loss,
            clipped_tokens=float((clipped.to(mask.dtype) * mask).sum().item()),
            loss_tokens=float(mask.sum().item()),
            ratio_sum=float((ratio.detach() * mask).sum().item()),
            kl_sum=float((kl.detach() * mask).sum().item()),
            sampler_weight_sum=float((weight.detach() * mask).sum().item()),
            sampler_bounded_tokens=float((bounded.to(mask.dtype) * mask).sum().item()),
        )


def update_statistics(config: LossConfig, totals: Mapping[str, float]) -> dict[str, float]:
    """An update's statistics particular to its objective, from the sums over its micro-batches (and ranks).

    `totals` holds the loss tokens (``tokens``), the sums of `LossResult`'s statistics (``clipped``, ``ratio``,
    ``kl``, ``sampler_weight``, ``sampler_bounded``) and the sampler gap on fresh and stale samples (``mismatch_kl``,
    ``stale_kl``, ``fresh_tokens``). A policy-gradient objective reports their means; SFT, which has no sampler
    ratio, none of them.
    """
    if not config.policy_gradient:
        return {}
    per_token = max(totals["tokens"], 1.0)
    stale_tokens = totals["tokens"] - totals["fresh_tokens"]
    stats = {
        "clip_fraction": totals["clipped"] / per_token,
        "ratio_mean": totals["ratio"] / per_token,
        "kl": totals["kl"] / per_token,
        "mismatch_kl": totals["mismatch_kl"] / max(totals["fresh_tokens"], 1.0),
        "stale_kl": totals["stale_kl"] / max(stale_tokens, 1.0),
        "fresh_tokens": totals["fresh_tokens"],
    }
    if config.sampler_correction != "none":
        stats |= {
            "sampler_weight_mean": totals["sampler_weight"] / per_token,
            "sampler_bounded_fraction": totals["sampler_bounded"] / per_token,
        }
    return stats


__all__ = [
    "OBJECTIVES",
    "ImportanceSamplingLevel",
    "LossConfig",
    "LossKind",
    "LossResult",
    "Normalization",
    "RewardScaling",
    "SamplerCorrection",
    "TokenObjective",
    "log_importance_weights",
    "nll_objective",
    "policy_loss",
    "sampler_weights",
    "sequence_mean",
    "update_statistics",
]
