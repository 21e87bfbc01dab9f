"""What no weight load can fix is refused before any rank loads weights, in one line, through the real CLI.

"Before" is observable without a clock: a refused run leaves no output folder (a rank creates it before it
loads the model), starts no torchrun (no rank's line), and builds no vLLM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tools.patience import HANG_S
from v1.errors import ConfigError
from v1.inference import check_vllm_start
from v1.train import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
VLLM_RECIPE = ROOT / "configs" / "train" / "tiny_first_letter_vllm.toml"


def v1_train(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if key != "V1_VLLM_PYTHON"}
    environ |= {"PYTHONPATH": str(ROOT), "V1_VLLM_CACHE": str(config.parent / "vllm_cache"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", "train", str(config), "--output-dir", str(config.parent / "out"), "--no-progress", *args],
        cwd=config.parent, env=environ, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


def recipe(tmp_path: Path, *replacements: tuple[str, str]) -> Path:
    text = VLLM_RECIPE.read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def assert_refused_before_loading(done: subprocess.CompletedProcess[str], config: Path, message: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("v1 train: error:") and message in lines[0], done.stderr[-3000:]
    assert not (config.parent / "out").exists(), "no rank got as far as its output folder (made before the model loads)"
    assert not (config.parent / "vllm_cache").exists(), "no vLLM was built"


@pytest.mark.parametrize("nproc", ["1", "2"])
def test_the_nccl_sync_on_a_cpu_trainer_is_refused_before_any_rank_starts(tmp_path: Path, nproc: str) -> None:
    config = recipe(tmp_path, ('weight_sync = "vllm"', 'weight_sync = "vllm_nccl"'), ("[model]\n", '[model]\ndevice = "cpu"\n'))
    done = v1_train(config, "--nproc", nproc)
    assert_refused_before_loading(done, config, "weight_sync = 'vllm_nccl'")
    assert "torch.distributed" not in done.stderr and "rank" not in done.stderr


def test_a_gpu_trainer_without_vllms_cuda_build_is_told_instead_of_building_the_cpu_one(tmp_path: Path) -> None:
    """`model.device = "cuda"` stands for a GPU machine here: the check reads the config, not the hardware."""
    config = recipe(tmp_path, ("[model]\n", '[model]\ndevice = "cuda"\n'))
    done = v1_train(config, "--nproc", "2")
    assert_refused_before_loading(done, config, "vllm does not import in this Python")
    assert "CPU build only for a run on the CPU" in done.stderr


def test_flash_attn_for_float32_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    config = recipe(tmp_path, ("[model]\n", '[model]\ndtype = "float32"\nattn_implementation = "flash_attention_2"\n'))
    done = v1_train(config, "--nproc", "2")
    assert_refused_before_loading(done, config, "fp16/bf16 only")


def test_vllm_placement_is_checked_from_the_config_and_the_gpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--nproc 8` on an 8-GPU machine leaves vLLM no GPU: refused by the launcher (`check_before_loading`), not after
    the ranks' loads. The GPU count is given: this machine has none."""
    monkeypatch.setenv("V1_VLLM_PYTHON", sys.executable)  # the build check passes: this is about placement
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = TrainConfig.load(VLLM_RECIPE)
    with pytest.raises(ConfigError, match=r"vLLM needs a GPU of its own.*--nproc 7"):
        check_vllm_start(config, trainer_ranks=8, trainer_on_gpu=True, gpu_count=8)
    check_vllm_start(config, trainer_ranks=7, trainer_on_gpu=True, gpu_count=8)
    check_vllm_start(config, trainer_ranks=8, trainer_on_gpu=False, gpu_count=8)
