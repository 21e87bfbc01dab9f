"""`loss.scale_rewards`: GRPO's std-normalised advantage as a built-in option (default: none, Dr. GRPO style)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from v1.errors import ConfigError
from v1.train import TrainConfig
from v1.train._orchestrator import RolloutGroup, StepBatch, StepCounts
from v1.train._run import batch_samples

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


def rollout(reward: float, mean: float) -> dict[str, Any]:
    tokens = {"prompt_ids": [1, 2], "completion_ids": [3, 4], "completion_mask": [1, 1], "completion_logprobs": [-0.1, -0.2]}
    return {"reward": reward, "advantage": reward - mean, "trajectory": [{"tokens": tokens}]}


def step(*groups: list[float]) -> StepBatch:
    built = [RolloutGroup(i, i, [rollout(r, statistics.fmean(rewards)) for r in rewards], 0) for i, rewards in enumerate(groups)]
    return StepBatch(0, built, [0] * len(built), StepCounts())


def advantages(batch: StepBatch, scale: Any) -> list[float]:
    return [sample.advantages[-1] for sample in batch_samples(batch, None, scale).samples]


def test_none_keeps_reward_minus_group_mean() -> None:
    assert advantages(step([1.0, 0.0, 0.0, 0.0]), "none") == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_group_divides_by_each_groups_reward_std() -> None:
    batch = step([1.0, 0.0, 0.0, 0.0], [2.0, 0.0])
    std_a, std_b = statistics.stdev([1.0, 0.0, 0.0, 0.0]), statistics.stdev([2.0, 0.0])
    expected = [a / (std_a + 1e-4) for a in (0.75, -0.25, -0.25, -0.25)] + [1.0 / (std_b + 1e-4), -1.0 / (std_b + 1e-4)]
    assert advantages(batch, "group") == pytest.approx(expected)


def test_batch_divides_by_the_steps_reward_std() -> None:
    batch = step([1.0, 0.0], [3.0, 1.0])
    std = statistics.stdev([1.0, 0.0, 3.0, 1.0])
    assert advantages(batch, "batch") == pytest.approx([a / (std + 1e-4) for a in (0.5, -0.5, 1.0, -1.0)])


def test_an_unknown_scaling_fails_with_its_path(tmp_path: Path) -> None:
    text = RECIPE.read_text().replace('kind = "grpo"', 'kind = "grpo"\nscale_rewards = "sometimes"')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match="scale_rewards"):
        TrainConfig.load(tmp_path / "bad.toml")
