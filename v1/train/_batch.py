"""Training samples from rollout states: the server's token ids and logprobs, never retokenized.

A multi-turn rollout is one sample as long as every turn's prompt ids start with the
previous turn's prompt + completion ids: the tokens in between (tool results, user
replies, the chat template's turn markers) join the sample with no loss, and each
completion's tokens carry loss where the server's `completion_mask` says so. When a
turn's prompt does not extend what came before (the history was rewritten, a
template re-rendered differently, a summary replaced turns), the turn starts a new
sample and the split is counted; nothing is spliced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Sample:
    """One token sequence to train on.

    `loss_mask[i]` is 1 where token `i` is a completion token that carries loss;
    `inference_logprobs[i]` is the server's log-probability of token `i` and `advantages[i]`
    its advantage (both 0.0 where no loss). `staleness` is how many optimizer steps behind the
    trained policy the weights that generated it were.
    """

    input_ids: list[int]
    loss_mask: list[int]
    inference_logprobs: list[float]
    advantages: list[float]
    reward: float = 0.0
    staleness: int = 0

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)

    def extend(self, ids: Sequence[int], mask: Sequence[int], logprobs: Sequence[float], advantage: float = 0.0) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend(mask)
        self.inference_logprobs.extend(logprobs)
        self.advantages.extend([advantage if m else 0.0 for m in mask])


@dataclass
class SampleCounts:
    """What batching met: samples built, turns that started a new sample, turns without tokens, truncations,
    rollouts left without loss because generation was cut (``mask_truncated_completions``)."""

    samples: int = 0
    new_sample_splits: int = 0
    steps_without_tokens: int = 0
    truncated_samples: int = 0
    masked_truncated: int = 0

    def add(self, other: SampleCounts) -> None:
        self.samples += other.samples
        self.new_sample_splits += other.new_sample_splits
        self.steps_without_tokens += other.steps_without_tokens
        self.truncated_samples += other.truncated_samples
        self.masked_truncated += other.masked_truncated


@dataclass
class StateSamples:
    samples: list[Sample] = field(default_factory=list)
    counts: SampleCounts = field(default_factory=SampleCounts)


def generation_truncated(state: Mapping[str, Any]) -> bool:
    """Whether generation was cut in this rollout: a turn ended on its token limit (``finish_reason`` length)
    or the context reached ``max_seq_len`` (the endpoint marks both ``is_truncated``)."""
    return bool(state.get("is_truncated")) or any(step.get("is_truncated") for step in state.get("trajectory") or [])


def trainable_rollouts(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The rollouts of `state` a trainer learns from: the state itself, or for an episode of roles
    (`state["roles"]`) each trainable role's rollout (the policy's by default; a judge's or a user's
    never), with the episode's reward and advantage."""
    roles = state.get("roles")
    if not isinstance(roles, Mapping):
        return [state]
    episode = {"reward": state.get("reward"), "advantage": state.get("advantage")}
    return [{**record, **episode} for record in roles.values() if isinstance(record, Mapping) and record.get("trainable")]


def samples_from_state(
    state: Mapping[str, Any], max_seq_len: int | None = None, advantage_scale: float = 1.0, mask_truncated: bool = False
) -> StateSamples:
    """The samples of one finished rollout (a `State` or its `RolloutOutput`); of an episode of roles,
    those of its trainable roles only (`trainable_rollouts`).

    Each trajectory step's advantage is its own when set, else the rollout's.

    Args:
        state: a rollout with `trajectory` steps carrying `tokens` (prompt/completion ids,
            completion mask and logprobs).
        max_seq_len: samples longer than this are cut to it (and counted as truncated).
        advantage_scale: every advantage is multiplied by this (``loss.scale_rewards``).
        mask_truncated: a rollout whose generation was cut (`generation_truncated`), or that `max_seq_len`
            cuts, gives no sample (``loss.mask_truncated_completions``), counted as ``masked_truncated``.
    """
    total = StateSamples()
    for rollout in trainable_rollouts(state):
        one = _samples_of_rollout(rollout, max_seq_len, advantage_scale, mask_truncated)
        total.samples.extend(one.samples)
        total.counts.add(one.counts)
    return total


def _samples_of_rollout(
    state: Mapping[str, Any], max_seq_len: int | None, advantage_scale: float, mask_truncated: bool
) -> StateSamples:
    result = StateSamples()
    if mask_truncated and generation_truncated(state):
        result.counts.masked_truncated = 1
        return result
    current: Sample | None = None
    rollout_advantage = float(state.get("advantage") or 0.0)
    reward = float(state.get("reward") or 0.0)
    for step in state.get("trajectory") or []:
        tokens = step.get("tokens")
        if not tokens or (not tokens.get("completion_ids") and not tokens.get("prompt_ids")):
            result.counts.steps_without_tokens += 1
            continue
        prompt_ids = list(tokens["prompt_ids"])
        completion_ids = list(tokens["completion_ids"])
        completion_mask = list(tokens.get("completion_mask") or [1] * len(completion_ids))
        logprobs = [float(value) for value in tokens.get("completion_logprobs") or []]
        if len(logprobs) != len(completion_ids) or len(completion_mask) != len(completion_ids):
            result.counts.steps_without_tokens += 1
            continue
        step_advantage = step.get("advantage")
        advantage = (float(step_advantage) if step_advantage is not None else rollout_advantage) * advantage_scale
        extends = (
            current is not None
            and len(prompt_ids) >= len(current.input_ids)
            and prompt_ids[: len(current.input_ids)] == current.input_ids
        )
        if current is not None and extends:
            new_prompt = prompt_ids[len(current.input_ids) :]
        else:
            if current is not None:
                result.samples.append(current)
                result.counts.new_sample_splits += 1
            current = Sample([], [], [], [], reward)
            new_prompt = prompt_ids
        current.extend(new_prompt, [0] * len(new_prompt), [0.0] * len(new_prompt))
        current.extend(completion_ids, [1 if m else 0 for m in completion_mask], logprobs, advantage)
    if current is not None:
        result.samples.append(current)
    if max_seq_len is not None:
        for sample in result.samples:
            if len(sample.input_ids) > max_seq_len:
                result.counts.truncated_samples += 1
                for values in (sample.input_ids, sample.loss_mask, sample.inference_logprobs, sample.advantages):
                    del values[max_seq_len:]
        if mask_truncated and result.counts.truncated_samples:  # the trainer's own cut truncates the completion too
            return StateSamples(counts=SampleCounts(masked_truncated=1))
    result.samples = [sample for sample in result.samples if sample.loss_tokens > 0]
    result.counts.samples = len(result.samples)
    return result


def samples_from_states(
    states: Iterable[Mapping[str, Any]],
    max_seq_len: int | None = None,
    staleness: int = 0,
    advantage_scale: float = 1.0,
    mask_truncated: bool = False,
) -> StateSamples:
    """`samples_from_state` over several rollouts (generated `staleness` steps behind, advantages times
    `advantage_scale`, truncated ones masked when `mask_truncated`), counts summed."""
    total = StateSamples()
    for state in states:
        one = samples_from_state(state, max_seq_len, advantage_scale, mask_truncated)
        for sample in one.samples:
            sample.staleness = staleness
        total.samples.extend(one.samples)
        total.counts.add(one.counts)
    return total


@dataclass
class TensorBatch:
    """Padded tensors of some samples, aligned for next-token prediction.

    `targets[:, i]` is the token predicted from position `i` of `input_ids`; `loss_mask`,
    `inference_logprobs` and `advantages` are aligned with `targets`.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    inference_logprobs: torch.Tensor
    advantages: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum().item())

    def to(self, device: Any) -> TensorBatch:
        return TensorBatch(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))


def collate(samples: Sequence[Sample], pad_id: int = 0) -> TensorBatch:
    """Right-pad samples into one `TensorBatch`."""
    import torch

    width = max(len(sample.input_ids) for sample in samples)

    def padded(values: list[Any], fill: Any) -> list[Any]:
        return values + [fill] * (width - len(values))

    ids = torch.tensor([padded(s.input_ids, pad_id) for s in samples], dtype=torch.long)
    attention = torch.tensor([padded([1] * len(s.input_ids), 0) for s in samples], dtype=torch.long)
    loss_mask = torch.tensor([padded(s.loss_mask, 0) for s in samples], dtype=torch.float32)
    logprobs = torch.tensor([padded(s.inference_logprobs, 0.0) for s in samples], dtype=torch.float32)
    advantages = torch.tensor([padded(s.advantages, 0.0) for s in samples], dtype=torch.float32)
    return TensorBatch(
        input_ids=ids,
        attention_mask=attention,
        targets=ids[:, 1:],
        loss_mask=loss_mask[:, 1:],
        inference_logprobs=logprobs[:, 1:],
        advantages=advantages[:, 1:],
    )


def micro_batches(samples: Sequence[Sample], micro_batch_size: int) -> list[list[Sample]]:
    """Samples in micro-batches of at most `micro_batch_size`, similar lengths together (less padding)."""
    ordered = sorted(samples, key=lambda sample: len(sample.input_ids))
    return [ordered[start : start + micro_batch_size] for start in range(0, len(ordered), micro_batch_size)]


__all__ = [
    "Sample",
    "SampleCounts",
    "StateSamples",
    "TensorBatch",
    "collate",
    "generation_truncated",
    "micro_batches",
    "samples_from_state",
    "samples_from_states",
    "trainable_rollouts",
]
