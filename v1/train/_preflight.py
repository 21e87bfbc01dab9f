"""What refuses a run without its weights, checked before any rank loads them (and before ``--nproc`` starts one).

A refusal that waits for the model costs every rank its load (minutes at 8B) and leaves the user
reading it once per rank; these need only the config and the machine.
"""

from __future__ import annotations

import importlib.util

import torch

from v1.errors import ConfigError
from v1.inference import check_vllm_start
from v1.train._config import TrainConfig
from v1.train._model import choose_attention

FORWARD_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "auto": torch.bfloat16, "float32": torch.float32}
"""The forward passes' dtype on a GPU as `model.dtype` names it (``auto``: bf16 where the GPU has it, which the load checks)."""


def trainer_device_type(config: TrainConfig) -> str:
    """``cuda`` or ``cpu``: where the trainer ranks train, read without starting CUDA (the launcher starts none).

    Raises:
        ConfigError: `model.device` is not a torch device.
    """
    if config.model.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return torch.device(config.model.device).type
    except RuntimeError:
        raise ConfigError(f"model.device = {config.model.device!r}: not a torch device (auto, cpu, cuda, cuda:N)") from None


def check_before_loading(config: TrainConfig, trainer_ranks: int) -> None:
    """Refuse, in one line, what no weight load can fix: a flash-attention kernel for float32 forward passes, the NCCL
    sync without a GPU trainer, and the vLLM this run would start (`check_vllm_start`: its build and its GPUs).

    Args:
        config: the run.
        trainer_ranks: the trainer ranks on this host (``--nproc``, or torchrun's ``LOCAL_WORLD_SIZE``).

    Raises:
        ConfigError: one of the above.
    """
    on_gpu = trainer_device_type(config) == "cuda"
    model, inference = config.model, config.inference
    if model.attn_implementation.startswith("flash_attention"):
        forward = FORWARD_DTYPES[model.dtype] if on_gpu else torch.float32
        try:
            choose_attention(model.attn_implementation, forward, on_gpu=on_gpu, flash_installed=flash_attn_installed())
        except ValueError as exc:
            raise ConfigError(f"model.attn_implementation = {model.attn_implementation!r}: {exc}") from None
    if inference.weight_sync == "vllm_nccl" and not on_gpu:
        raise ConfigError(
            "inference.weight_sync = 'vllm_nccl' broadcasts the weights over NCCL from the trainer's GPU and this run "
            "trains on the CPU: use weight_sync = 'vllm' there"
        )
    if inference.engine == "vllm" and inference.base_url is None:
        check_vllm_start(config, trainer_ranks, on_gpu)


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


__all__ = ["check_before_loading", "trainer_device_type"]
