"""Checkpoints per rank (#43): under FSDP2 each rank writes and reads its own shard of the model and the AdamW
state, nothing is gathered on one rank to save, resume or push weights to a file sync, and `v1 train export`
joins a checkpoint into one folder transformers loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from v1.errors import ConfigError  # noqa: E402
from v1.train import TrainConfig  # noqa: E402

from .fsdp_steps import new_trainer  # noqa: E402
from .test_distributed import ROOT, torchrun  # noqa: E402


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("shards")
    done = torchrun(str(ROOT / "tests" / "train" / "fsdp_checkpoint.py"), str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    return Path(report["checkpoint"]), report, torch.load(out / "weights.pt", weights_only=True)


def v1_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "v1.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_each_rank_writes_its_own_shard_and_resume_reads_only_its_own(sharded_run: Any) -> None:
    checkpoint, report, weights = sharded_run
    assert report["world"] == 2
    files = [checkpoint / "shards" / f"rank_{rank}-of-2.safetensors" for rank in range(2)]
    assert sorted(path.name for path in (checkpoint / "shards").iterdir()) == sorted(path.name for path in files)
    assert not (checkpoint / "model").exists() and not (checkpoint / "trainer.pt").exists()  # nothing gathered whole
    first, second = (load_file(path) for path in files)
    assert first.keys() == second.keys()
    rows = [name for name in first if name.startswith("model.model.layers.0.") and first[name].dim() == 2]
    assert rows and all(not torch.equal(first[name], second[name]) for name in rows)  # each rank's own rows
    total = sum(path.stat().st_size for path in files)
    for rank, figures in enumerate(report["ranks"]):
        assert figures["opened"] == [rank]  # resume under the same ranks: its own file, no other
        assert 0.95 * figures["own_file_bytes"] <= figures["bytes_read"] <= figures["own_file_bytes"]
        assert figures["own_file_bytes"] <= 0.55 * total  # about half of the model and AdamW state each
        assert figures["resumed_step"] == 1
    for name, tensor in weights["going"].items():  # the resumed trainer's next step is the saver's
        torch.testing.assert_close(weights["back"][name], tensor, atol=1e-6, rtol=0), name


def test_no_step_save_or_weight_sync_allocates_a_whole_model_buffer_on_one_rank(sharded_run: Any) -> None:
    checkpoint, report, weights = sharded_run
    for figures in report["ranks"]:
        whole = figures["whole_fp32_bytes"]
        assert 0 < figures["step"]["largest"] < whole / 2  # a layer's gathered weights, never the model's
        assert figures["save"]["peak"] < whole / 8  # each rank writes the shards it holds: nothing gathered
        assert 0 < figures["sync"]["largest"] < whole / 2  # one whole tensor at a time
        assert figures["streamed"] and figures["sync_alive_bytes"] == 0  # each freed before the next gather
    synced = load_file(checkpoint.parents[2] / "synced" / "model.safetensors")
    assert synced.keys() == weights["after_one"].keys()
    for name, tensor in weights["after_one"].items():  # in the serving dtype, the trained weights
        assert synced[name].dtype == torch.bfloat16 and torch.equal(synced[name], tensor.to(torch.bfloat16)), name


def test_a_fresh_run_reads_its_own_rows_of_a_pretrained_folder_and_no_rank_holds_it_whole(
    sharded_run: Any, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint, report, weights = sharded_run
    folder = checkpoint.parents[2] / "pretrained"
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)  # transformers' own load, whole
    expected = reference.state_dict()
    assert weights["pretrained"].keys() == expected.keys()
    for name, tensor in weights["pretrained"].items():  # the bf16 file's values, as fp32 master weights
        assert tensor.dtype == torch.float32 and torch.equal(tensor, expected[name]), name
    buffers = dict(reference.named_buffers())
    assert weights["pretrained_buffers"].keys() == buffers.keys() and buffers  # rotary frequencies, computed
    for name, buffer in weights["pretrained_buffers"].items():
        assert torch.equal(buffer, buffers[name]), name
    for figures in report["ranks"]:
        whole_file = figures["pretrained_file_bytes"]
        assert 0.4 * whole_file <= figures["pretrained_bytes_read"] <= 0.6 * whole_file  # its own half of the rows
        load = figures["pretrained_load"]
        assert load["peak"] < 0.6 * figures["whole_fp32_bytes"]  # its fp32 shards and a slice, never the whole model
        assert load["largest"] < figures["whole_fp32_bytes"] / 4
        assert load["mapped"] == whole_file  # the file mapped, read only where its rows are


def test_export_makes_one_folder_transformers_loads_with_the_trained_weights(sharded_run: Any, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    checkpoint, _, weights = sharded_run
    done = v1_cli("train", "export", str(checkpoint), str(tmp_path / "hf"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"v1 train export: {checkpoint} -> {tmp_path / 'hf'}"
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert exported.keys() == weights["after_one"].keys()
    for name, tensor in weights["after_one"].items():
        assert torch.equal(exported[name], tensor), name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "v1 train export takes CHECKPOINT OUT: a checkpoints/step_N folder and a new folder"),
        (("{tmp}", "{tmp}/out"), "v1 train export: {tmp}: not a complete checkpoint (no run.json in it)"),
        (("{checkpoint}", "{checkpoint}"), "v1 train export: {checkpoint}: exists and is not an empty folder; name a new one"),
    ],
    ids=["no-paths", "not-a-checkpoint", "out-not-empty"],
)
def test_export_refuses_bad_paths_in_one_line(sharded_run: Any, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    checkpoint = sharded_run[0]
    fill = {"tmp": str(tmp_path), "checkpoint": str(checkpoint)}
    done = v1_cli("train", "export", *(arg.format(**fill) for arg in args), cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == f"v1 train: error: {message.format(**fill)}"


def test_one_process_resumes_a_sharded_checkpoint_from_every_ranks_rows(sharded_run: Any) -> None:
    from v1.train._model import load_checkpoint_weights, load_policy

    checkpoint, report, weights = sharded_run
    config = TrainConfig.model_validate({"model": {"tiny": report["shape"]}, "env": {"id": "x"}})
    model = load_checkpoint_weights(load_policy(config.model)[0], checkpoint)
    for name, tensor in weights["after_one"].items():
        assert torch.equal(model.state_dict()[name], tensor), name
    trainer = new_trainer(model)
    trainer.load(checkpoint)
    assert trainer.step == 1 and trainer.optimizer.state  # the moments of both ranks' rows


def test_a_tampered_sharded_checkpoint_is_one_line(sharded_run: Any, tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import save_file

    from v1.train._model import load_checkpoint_weights, load_policy

    copied = tmp_path / "step_1"
    shutil.copytree(sharded_run[0], copied)
    config = TrainConfig.model_validate({"model": {"tiny": sharded_run[1]["shape"]}, "env": {"id": "x"}})
    model = load_checkpoint_weights(load_policy(config.model)[0], copied)
    state = json.loads((copied / "trainer.json").read_text())
    state["optimizer"]["param_groups"][0]["maximize"] = True
    (copied / "trainer.json").write_text(json.dumps(state))
    with pytest.raises(ConfigError, match=r"trainer\.json: optimizer maximize is True in the checkpoint but False"):
        new_trainer(model).load(copied)
    shard = copied / "shards" / "rank_1-of-2.safetensors"
    tensors = load_file(shard)
    tensors["model.model.norm.weight"] = torch.zeros(3)
    save_file(tensors, shard)
    with pytest.raises(ConfigError, match=r"rank_1-of-2\.safetensors: model\.model\.norm\.weight has shape \[3\]"):
        load_checkpoint_weights(model, copied)
