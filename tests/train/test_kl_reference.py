"""The KL reference is the policy RL starts from: after the SFT warm-up, and the same after `--resume`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from v1.errors import ConfigError  # noqa: E402
from v1.train import TrainConfig  # noqa: E402
from v1.train._ranks import sft_batches  # noqa: E402
from v1.train._run import build_sft_samples, prepare, train  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


def kl_config(output_dir: Path, max_steps: int) -> TrainConfig:
    config = TrainConfig.load(RECIPE)
    return config.model_copy(
        update={
            "output_dir": str(output_dir),
            "max_steps": max_steps,
            "micro_batch_size": 16,
            "loss": config.loss.model_copy(update={"kl_coef": 0.1}),
            "rollouts": config.rollouts.model_copy(update={"examples_per_step": 2, "rollouts_per_example": 8}),
            "eval": config.eval.model_copy(update={"at_start": False, "at_end": False}),
            "sft": config.sft.model_copy(update={"steps": 12, "batch_size": 32}),
        }
    )


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_the_reference_is_the_policy_after_the_sft_warm_up(tmp_path: Path) -> None:
    config = kl_config(tmp_path, 1)
    prepared = prepare(config, resume=False)
    worker = prepared.worker
    initial = weights(worker.model)
    samples = build_sft_samples(config, prepared.env, worker.tokenizer)
    history = worker.sft(sft_batches(samples, 3, 16, config.seed))
    assert len(history) == 3
    warmed = weights(worker.model)
    assert not same(warmed, initial)
    reference = worker.trainer.ref_model
    assert reference is not None and same(weights(reference), warmed)
    assert not any(p.requires_grad for p in reference.parameters())


async def test_kl_with_warm_up_trains_and_resume_keeps_the_reference_at_step_0(tmp_path: Path) -> None:
    first = await train(kl_config(tmp_path, 2))
    assert first.steps == 2 and first.sft_steps == 12
    from transformers import AutoModelForCausalLM

    start = weights(AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_0" / "model"))
    resumed_from = weights(AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_2" / "model"))
    assert not same(start, resumed_from)

    prepared = prepare(kl_config(tmp_path, 3), resume=True)
    reference = prepared.worker.trainer.ref_model
    assert reference is not None and same(weights(reference), start)

    resumed = await train(kl_config(tmp_path, 3), resume=True)
    assert resumed.steps == 3
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert lines[2]["kl"] > 0  # the policy two steps from the anchor, not a fresh copy of itself


async def test_resume_with_kl_and_no_step_0_says_so(tmp_path: Path) -> None:
    await train(kl_config(tmp_path, 1))
    for path in sorted((tmp_path / "checkpoints" / "step_0").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (tmp_path / "checkpoints" / "step_0").rmdir()
    with pytest.raises(ConfigError, match="KL reference"):
        prepare(kl_config(tmp_path, 2), resume=True)
