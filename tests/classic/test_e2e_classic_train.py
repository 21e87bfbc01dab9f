"""`v1 train` on a classic environment: the tiny recipe's trainer, rollouts through the endpoint, on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v1.train import (  # noqa: E402
    TrainConfig,
    train,
)

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


async def test_the_trainer_trains_on_a_classic_single_turn_env(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    config = config.model_copy(
        update={
            "output_dir": str(tmp_path),
            "max_steps": 2,
            "micro_batch_size": 8,
            "env": config.env.model_copy(update={"id": "classic_first_letter"}),
            "rollouts": config.rollouts.model_copy(update={"examples_per_step": 2, "rollouts_per_example": 8}),
            "eval": config.eval.model_copy(update={"num_examples": 4}),
            "sft": config.sft.model_copy(update={"steps": 12, "batch_size": 32}),
        }
    )
    result = await train(config)
    assert result.steps == 2
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line["samples"] > 0 and "loss" in line and "reward" in line for line in lines)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_before"] is not None and summary["eval_after"] is not None
    start, end = (
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / f"step_{n}" / "model") for n in (0, 2)
    )
    assert any(not torch.equal(p, start.state_dict()[name]) for name, p in end.state_dict().items())
