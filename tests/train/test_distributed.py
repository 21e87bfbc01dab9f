"""FSDP2 under torchrun for real (2 processes, gloo on CPU): the sharded step is the one-process step."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from v1.errors import ConfigError  # noqa: E402
from v1.inference import build_tiny_model  # noqa: E402
from v1.train.config import DistributedConfig, TrainConfig  # noqa: E402
from v1.train.ranks import RankGroup, backend_for, share_samples  # noqa: E402

from .fsdp_steps import MICRO_BATCH_SIZE, SHAPE, batch, new_trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def torchrun(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 ARGS`` in its own session: on a timeout its workers are killed too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_two_ranks_train_the_same_weights_as_one_process_and_resume_from_the_gathered_checkpoint(tmp_path: Path) -> None:
    shares = [share_samples(batch(step), 2) for step in range(3)]
    # the shares need different numbers of micro-batches: the rank with fewer runs a loss-free pass
    assert any(len({math.ceil(len(share) / MICRO_BATCH_SIZE) for share in pair}) == 2 for pair in shares)

    done = torchrun(str(ROOT / "tests" / "train" / "fsdp_steps.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    sharded = torch.load(tmp_path / "weights.pt", weights_only=True)
    report = json.loads((tmp_path / "stats.json").read_text())
    assert report["world"] == 2 and report["step"] == 3

    model, _ = build_tiny_model(SHAPE)
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = new_trainer(model)
    stats = [trainer.train_step(batch(step)) for step in range(2)]
    after_two = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    stats.append(trainer.train_step(batch(2)))

    for name, tensor in after_two.items():
        # Adam divides by sqrt(v): float noise from another summation order reaches ~2e-5 on near-zero gradients
        torch.testing.assert_close(sharded["after_two"][name], tensor, atol=5e-5, rtol=1e-4)
    # the third step ran on a fresh sharded model that loaded the gathered optimizer state
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(sharded["after_three"][name], tensor, atol=5e-5, rtol=1e-4)
    assert sum(not torch.equal(model.state_dict()[name], initial[name]) for name in initial) > len(initial) // 2
    for one, two in zip(stats, report["stats"]):
        for key in ("loss", "grad_norm", "loss_tokens", "clip_fraction", "entropy"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


def test_distributed_settings_are_checked() -> None:
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"nccl.* needs CUDA"):
            backend_for(DistributedConfig(backend="nccl"))
    assert backend_for(DistributedConfig(backend="gloo")) == "gloo"
    with pytest.raises(ConfigError, match=r"distributed\.backend"):
        TrainConfig.model_validate(
            {"model": {}, "env": {"id": "x"}, "inference": {}, "rollouts": {}, "loss": {}, "optim": {}, "eval": {},
             "sft": {}, "wandb": {}, "distributed": {"backend": "mpi"}}
        )  # fmt: skip
    with pytest.raises(ConfigError, match="timeout_s"):
        DistributedConfig(timeout_s=0)


def test_bad_torchrun_variables_are_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ConfigError, match="RANK, WORLD_SIZE and LOCAL_RANK must be integers"):
        RankGroup.start(DistributedConfig(backend="gloo"))
    monkeypatch.delenv("RANK")
    assert not RankGroup.start(DistributedConfig()).distributed  # not under torchrun: one process
