"""The tiny recipe with issue 35's features, for real: LoRA adapters served merged, TensorBoard events, and the
main job free of transformers' deprecation warnings."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.test_e2e_train import ROOT, few_steps, model_logprobs, served_logprobs, write_toml  # noqa: E402
from tests.tools.patience import HANG_S  # noqa: E402
from v1.inference import InferenceServer, build_tiny_model  # noqa: E402
from v1.train import train  # noqa: E402
from v1.train._config import LoraSection, TrainConfig  # noqa: E402


def with_features(config: TrainConfig, **loss: object) -> TrainConfig:
    # adapters on a random base can't fit the answers the way full fine-tuning does (the SFT loss stays
    # near 4.8), so groups without reward variance are trained on too: every step runs
    return config.model_copy(
        update={
            "model": config.model.model_copy(update={"lora": LoraSection(r=8, alpha=16)}),
            "rollouts": config.rollouts.model_copy(update={"filter_zero_variance": False}),
            "tensorboard": config.tensorboard.model_copy(update={"enabled": True}),
            "loss": config.loss.model_copy(update=loss),
        }
    )


async def test_lora_trains_only_adapters_serves_merged_weights_resumes_and_logs_to_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    tensorboard = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    base_config = TrainConfig.load(ROOT / "configs" / "train" / "tiny_first_letter.toml")
    model, tokenizer = build_tiny_model(base_config.model.tiny)
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        config = with_features(
            few_steps(tmp_path, server.url, 2), importance_sampling_level="sequence", sampler_correction="sequence_mask"
        )
        result = await train(config)
        assert result.steps == 2 and server.weight_version == 3
        ids_after, served_after = await served_logprobs(server)

    end = tmp_path / "checkpoints" / "step_2" / "model"
    assert (end / "adapter_config.json").is_file() and (end / "adapter_model.safetensors").is_file()
    assert not (end / "model.safetensors").exists()  # the adapter only, not the base weights
    from peft import PeftModel

    base, _ = build_tiny_model(base_config.model.tiny)
    trained = PeftModel.from_pretrained(base, str(end)).eval()
    # the server got the merged weights: it serves what base + adapter compute
    assert served_after == pytest.approx(model_logprobs(trained, ids_after, len(served_after)), abs=1e-3)
    assert any(name.endswith("lora_B.default.weight") and p.abs().sum() > 0 for name, p in trained.named_parameters())

    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("sampler_weight_mean" in line for line in lines)
    events = tensorboard.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for name in ("reward", "loss", "sampler_weight_mean", "groups_trained"):
        logged = events.Scalars(name)
        assert [event.step for event in logged] == [1, 2]
        assert [event.value for event in logged] == pytest.approx([float(line[name]) for line in lines], rel=1e-6)

    # resume with the built-in engine here: the adapter loads onto the configured base, the engine gets it merged
    resumed = await train(with_features(few_steps(tmp_path, None, 3)), resume=True)
    assert resumed.steps == 3 and (tmp_path / "checkpoints" / "step_3" / "model" / "adapter_config.json").is_file()


async def test_the_main_job_runs_with_transformers_deprecations_as_errors(tmp_path: Path) -> None:
    """The recipe's path (SFT warm-up, built-in engine, shared-prefix forward, eval, checkpoints) for a few steps
    with FutureWarning and DeprecationWarning raised as errors, and no deprecation logged by transformers."""
    toml = write_toml(few_steps(tmp_path, None, 2), tmp_path / "run.toml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-W", "error::FutureWarning", "-W", "error::DeprecationWarning",
        "-m", "v1.train", str(toml), "--no-progress",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=HANG_S)
    except TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    output = out.decode() + err.decode()
    assert process.returncode == 0, output[-3000:]
    assert "v1 train: 2 steps" in output
    assert "deprecated" not in output.lower() and "Warning" not in output, output[-3000:]
