"""What a run reports across a resume, `eval.every`, pushing weights on resume, and light late steps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.train.test_trainer import on_policy_samples, tiny_model  # noqa: E402
from v1.inference import InferenceServer, build_tiny_model  # noqa: E402
from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
    PolicyTrainer,
    TrainConfig,
    train,
)

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


def short_run(output_dir: Path, max_steps: int, *, base_url: str | None = None, eval_every: int = 0) -> TrainConfig:
    config = TrainConfig.load(RECIPE)
    return config.model_copy(
        update={
            "output_dir": str(output_dir),
            "max_steps": max_steps,
            "micro_batch_size": 16,
            "rollouts": config.rollouts.model_copy(update={"examples_per_step": 2, "rollouts_per_example": 8}),
            "eval": config.eval.model_copy(update={"num_examples": 4, "at_start": False, "every": eval_every}),
            "sft": config.sft.model_copy(update={"steps": 12, "batch_size": 32}),
            "inference": config.inference.model_copy(
                update={"base_url": base_url, "weight_sync": "http" if base_url else "in_process"}
            ),
        }
    )


def lines(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


async def test_eval_every_and_summary_after_resume_are_cumulative(tmp_path: Path) -> None:
    first = await train(short_run(tmp_path, 2, eval_every=2))
    metrics = lines(tmp_path)
    assert "eval_reward" not in metrics[0] and 0.0 <= metrics[1]["eval_reward"] <= 1.0
    assert all(0.0 < line["step_weight"] <= 1.0 for line in metrics)

    segment_started = time.time()
    resumed = await train(short_run(tmp_path, 3), resume=True)
    segment = time.time() - segment_started
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert resumed.steps == 3 and summary["steps"] == 3
    assert summary["sft_steps"] == 12 and resumed.sft_steps == 12  # the warm-up ran in the first segment
    assert summary["wall_time_s"] == pytest.approx(resumed.wall_time_s)
    assert segment < resumed.wall_time_s < first.wall_time_s + segment  # the first segment's time up to step 2 counts


async def test_the_environment_is_torn_down_once_when_the_run_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "teardown.log"
    monkeypatch.setenv("TEARDOWN_MARKER", str(marker))
    config = short_run(tmp_path / "run", 1)
    env = config.env.model_copy(update={"id": "tests.train.torn_first_letter"})
    result = await train(config.model_copy(update={"env": env}))
    assert result.steps == 1
    assert marker.read_text() == "torn down\n"


async def test_resuming_step_0_pushes_the_checkpoint_to_an_external_server(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    model, tokenizer = build_tiny_model(config.model.tiny)
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        await train(short_run(tmp_path, 0, base_url=server.url))  # the warm-up, step_0, no RL step
        assert server.weight_version == 1
    fresh, tokenizer = build_tiny_model(config.model.tiny)  # a restarted server: the initial weights again
    async with InferenceServer(fresh, tokenizer, model_name="tiny") as server:
        await train(short_run(tmp_path, 0, base_url=server.url), resume=True)
        assert server.weight_version == 1  # the checkpoint being resumed, not the server's initial weights
        from transformers import AutoModelForCausalLM

        step_0 = AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_0" / "model").state_dict()
        served = fresh.state_dict()
        assert all(torch.equal(served[name], tensor) for name, tensor in step_0.items())


def test_a_light_step_moves_at_its_share_of_the_learning_rate() -> None:
    moved = []
    for weight in (1.0, 0.125):
        model = tiny_model()
        before = torch.cat([p.detach().flatten() for p in model.parameters()])
        trainer = PolicyTrainer(model, LossConfig(), OptimConfig(lr=1e-2), max_steps=2)
        stats = trainer.train_step(on_policy_samples(model, [1.0, -1.0]), weight=weight)
        assert stats["step_weight"] == weight and stats["lr"] == pytest.approx(1e-2 * weight)
        assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)  # the next step is a full one again
        moved.append(float((torch.cat([p.detach().flatten() for p in model.parameters()]) - before).norm()))
    assert moved[1] == pytest.approx(moved[0] * 0.125, rel=1e-3)
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="weight"):
            PolicyTrainer(tiny_model(), LossConfig(), OptimConfig(), max_steps=1).train_step([], weight=bad)


async def test_steps_run_on_a_frozen_heap_and_report_where_their_time_went(tmp_path: Path) -> None:
    import gc

    assert gc.get_freeze_count() == 0
    frozen: list[int] = []
    await train(short_run(tmp_path, 3), on_step=lambda metrics: frozen.append(gc.get_freeze_count()))
    # The models and libraries stay out of the collector's reach during the steps (what the first
    # step loaded, the SDK clients and the pools, too); the caller's collector is as it was afterwards.
    assert len(frozen) == 3 and min(frozen) > 100_000
    assert gc.get_freeze_count() == 0
    for line in lines(tmp_path):
        parts = line["rollout_wait_s"] + line["train_time_s"] + line["weight_sync_s"]
        assert min(line["rollout_wait_s"], line["train_time_s"], line["weight_sync_s"]) >= 0
        assert parts <= line["step_time_s"] + 1e-6
