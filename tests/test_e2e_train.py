"""The tiny recipe for a few steps, for real: built-in inference server, Env rollouts, trainer, weight sync, resume."""

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

from tests.tools.patience import HANG_S  # noqa: E402
from v1.inference import InferenceServer, build_tiny_model  # noqa: E402
from v1.inference._weight_sync import save_weights  # noqa: E402
from v1.train import (  # noqa: E402
    TrainConfig,
    train,
)
from v1.train._logprobs import token_logprobs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "configs" / "train" / "tiny_first_letter.toml"
PROMPT = [{"role": "user", "content": "abc"}]


def few_steps(output_dir: Path, base_url: str | None, max_steps: int) -> TrainConfig:
    config = TrainConfig.load(RECIPE)
    return config.model_copy(
        update={
            "output_dir": str(output_dir),
            "max_steps": max_steps,
            "micro_batch_size": 8,
            "rollouts": config.rollouts.model_copy(update={"examples_per_step": 2, "rollouts_per_example": 8}),
            "eval": config.eval.model_copy(update={"num_examples": 4}),
            # enough warm-up that some rollouts are right (groups with reward variance), no more
            "sft": config.sft.model_copy(update={"steps": 12, "batch_size": 32}),
            "inference": config.inference.model_copy(
                update={"base_url": base_url, "weight_sync": "http" if base_url else "in_process"}
            ),
        }
    )


async def served_logprobs(server: InferenceServer) -> tuple[list[int], list[float]]:
    import httpx

    body = {"model": "tiny", "messages": PROMPT, "max_tokens": 3, "temperature": 0.0, "logprobs": True, "return_token_ids": True}
    async with httpx.AsyncClient(timeout=HANG_S) as client:
        answer = (await client.post(server.url + "/chat/completions", json=body)).json()
    choice = answer["choices"][0]
    return answer["prompt_token_ids"] + choice["token_ids"], [item["logprob"] for item in choice["logprobs"]["content"]]


def model_logprobs(model: torch.nn.Module, ids: list[int], completion_length: int) -> list[float]:
    tensor = torch.tensor([ids])
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, tensor, torch.ones_like(tensor), tensor[:, 1:])
    return logprobs[0, -completion_length:].tolist()


async def test_tiny_recipe_trains_syncs_weights_to_the_server_and_resumes(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    model, tokenizer = build_tiny_model(config.model.tiny)
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        ids_before, served_before = await served_logprobs(server)
        result = await train(few_steps(tmp_path, server.url, 2))
        assert result.steps == 2 and result.sft_steps == 12
        # the SFT warm-up and each RL step pushed weights through POST /update_weights
        assert server.weight_version == 3
        ids_after, served_after = await served_logprobs(server)

    start = tmp_path / "checkpoints" / "step_0" / "model"
    end = tmp_path / "checkpoints" / "step_2" / "model"
    from transformers import AutoModelForCausalLM

    start_model, end_model = (AutoModelForCausalLM.from_pretrained(path).eval() for path in (start, end))
    changed = [name for name, p in end_model.state_dict().items() if not torch.equal(p, start_model.state_dict()[name])]
    assert changed, "RL steps must change the weights"
    # the server now serves exactly the trained weights: its logprobs are the final checkpoint's
    assert served_after != served_before or ids_after != ids_before
    assert served_after == pytest.approx(model_logprobs(end_model, ids_after, len(served_after)), abs=1e-3)

    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for key in ("reward", "loss", "entropy", "kl", "clip_fraction", "trainer_tokens_per_s", "staleness_mean", "dropped_stale"):
        assert key in lines[0]
    assert lines[0]["filtered_zero_variance"] >= 0 and lines[0]["samples"] > 0
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_before"] is not None and summary["eval_after"] is not None

    # resume with the built-in server in this process: the step count continues from the checkpoint
    run = json.loads((tmp_path / "checkpoints" / "step_2" / "run.json").read_text())
    resumed = await train(few_steps(tmp_path, None, 3), resume=True)
    assert resumed.steps == 3
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert json.loads((tmp_path / "checkpoints" / "step_3" / "run.json").read_text())["cursor"] >= run["cursor"]
    assert resumed.eval_before == summary["eval_before"]


def write_toml(config: TrainConfig, path: Path) -> Path:
    """`config` as a TOML file (top-level fields, then one table per section)."""
    path.write_text(config.to_toml())
    return path


@pytest.mark.slow
async def test_torchrun_two_ranks_train_with_fsdp2_and_the_server_serves_the_gathered_weights(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    model, tokenizer = build_tiny_model(config.model.tiny)
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        toml = write_toml(few_steps(tmp_path, server.url, 2), tmp_path / "run.toml")
        assert TrainConfig.load(toml) == few_steps(tmp_path, server.url, 2)
        _, served_before = await served_logprobs(server)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "v1.train", str(toml), "--no-progress",
            cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout=HANG_S)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)  # torchrun and its workers
            raise
        assert process.returncode == 0, err.decode()[-3000:]
        # rank 0 reports once; the SFT warm-up and both steps reached the server from rank 0
        assert out.decode().count("v1 train: 2 steps") == 1
        assert server.weight_version == 3
        ids_after, served_after = await served_logprobs(server)

    from transformers import AutoModelForCausalLM

    from v1.train import export_checkpoint

    # the ranks wrote their own shards; `v1 train export`'s function joins each into one folder
    start, end = (export_checkpoint(tmp_path / "checkpoints" / f"step_{step}", tmp_path / f"hf_{step}") for step in (0, 2))

    start_model, end_model = (AutoModelForCausalLM.from_pretrained(path).eval() for path in (start, end))
    assert any(not torch.equal(p, start_model.state_dict()[name]) for name, p in end_model.state_dict().items())
    assert json.loads((end / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    assert served_after != served_before
    assert served_after == pytest.approx(model_logprobs(end_model, ids_after, len(served_after)), abs=1e-3)
    # the checkpoint the two ranks wrote (a shard each) resumes in one process, reading both ranks' rows
    resumed = await train(few_steps(tmp_path, None, 3), resume=True)
    assert resumed.steps == 3
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_weights_folder_round_trip(tmp_path: Path) -> None:
    from v1.inference import load_state_dict

    model, _ = build_tiny_model({"seed": 1})
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    save_weights(state, tmp_path)
    loaded = load_state_dict(tmp_path)
    assert set(loaded) == set(state) and all(torch.equal(loaded[name], state[name]) for name in state)


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(test_tiny_recipe_trains_syncs_weights_to_the_server_and_resumes(Path("/tmp/e2e")))
