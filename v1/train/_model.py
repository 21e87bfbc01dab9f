"""Loading the policy: a local transformers folder or a tiny model built from a config; device, dtype, attention."""

from __future__ import annotations

import importlib.util
import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from accelerate import init_empty_weights
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from v1.config import TinyModelConfig
from v1.errors import ConfigError
from v1.inference import build_tiny_model, build_tiny_tokenizer
from v1.train._config import ModelConfig
from v1.train._data_only import unpickling_reason
from v1.train._lora import is_adapter_folder, with_lora
from v1.train._pretrained import PretrainedRows, weight_files
from v1.train._shards import ShardFiles, read_model_shards
from v1.train._trainer import shard_with_fsdp2

logger = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """``auto``: the local rank's GPU when CUDA is available, else the CPU."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


FLASH_ATTENTION = "flash_attention_2"
FLASH_DTYPES = (torch.float16, torch.bfloat16)
"""The only dtypes flash-attn's kernels take."""


def attention_implementation(config: ModelConfig, device: torch.device) -> str:
    """The policy's attention kernel (`choose_attention` for this run's forward dtype, `autocast_dtype`).

    Raises:
        ConfigError: a flash-attention kernel configured for float32 forward passes.
    """
    forward = autocast_dtype(config, device) or torch.float32
    installed = importlib.util.find_spec("flash_attn") is not None
    try:
        return choose_attention(config.attn_implementation, forward, on_gpu=device.type == "cuda", flash_installed=installed)
    except ValueError as exc:
        raise ConfigError(
            f"model.attn_implementation = {config.attn_implementation!r}: {exc} (model.dtype = {config.dtype!r})"
        ) from None


def choose_attention(requested: str, forward: torch.dtype, *, on_gpu: bool, flash_installed: bool) -> str:
    """The attention kernel: `requested`, or for ``auto`` ``flash_attention_2`` on a GPU with flash-attn installed when
    the forward passes run in fp16/bf16 (`forward`), else ``sdpa``, the fallback named in the log when flash-attn was
    there but the dtype ruled it out.

    Raises:
        ValueError: a flash-attention kernel requested for another dtype.
    """
    if requested.startswith("flash_attention"):
        if forward not in FLASH_DTYPES:
            raise ValueError(f"flash-attn takes fp16/bf16 only and this run computes in {forward}: use bfloat16 on a GPU")
        return requested
    if requested != "auto":
        return requested
    if not (on_gpu and flash_installed):
        return "sdpa"
    if forward in FLASH_DTYPES:
        return FLASH_ATTENTION
    logger.warning(
        "attention: sdpa, not flash_attention_2 (installed): flash-attn takes fp16/bf16 only and this run computes in %s",
        forward,
    )
    return "sdpa"


def autocast_dtype(config: ModelConfig, device: torch.device) -> torch.dtype | None:
    """The mixed-precision dtype of forward passes: bf16 on GPUs that support it (``auto``), else none (fp32)."""
    if config.dtype == "float32" or device.type != "cuda":
        return None
    if config.dtype == "float16":
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else None


def configured_tokenizer(config: ModelConfig) -> Any:
    """The configured model's tokenizer and chat template: `config.path`'s, or the tiny one rebuilt from `config.tiny`.

    A checkpoint's own tokenizer files are never read: a checkpoint is outside data, and its chat
    template would render every prompt the run trains on (one can hang the run or add an instruction
    to each prompt). The checkpoint narrows the weights, never the prompt.

    Raises:
        ConfigError: neither is set, or `config.path` holds no loadable tokenizer.
    """
    if config.path is not None:
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(config.path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.path {config.path}: cannot load a tokenizer: {exc}") from None
    if config.tiny is not None:
        return build_tiny_tokenizer(TinyModelConfig.model_validate(config.tiny).vocab_size)
    raise ConfigError("[model]: set path (a save_pretrained folder) or tiny (a tiny-model config)")


def without_weights(build: Callable[[], Any]) -> Any:
    """The model `build` makes, its parameters on the ``meta`` device and its buffers computed on the CPU."""
    with init_empty_weights(include_buffers=False):
        model = build()
    model.tie_weights()  # accelerate's context gives a tied parameter a meta copy of its own: tie it again
    return model


def build_policy(config: ModelConfig, source: str | None, device: torch.device, *, skeleton: bool = False) -> tuple[Any, Any]:
    """The model (fp32, on the CPU) and its tokenizer.

    The weights come from `source` (a checkpoint's folder, or the configured model's), the tokenizer
    from the configured model always (`configured_tokenizer`). With `skeleton`, a folder's config is
    read and the model built without weights (its parameters on the ``meta`` device, its buffers,
    such as rotary frequencies, computed on the CPU).

    Raises:
        ConfigError: when neither `source` nor a tiny config is given, or the folder can't be loaded.
    """
    if source is not None:
        from transformers import AutoConfig, AutoModelForCausalLM

        attention = attention_implementation(config, device)
        tokenizer = configured_tokenizer(config)
        try:
            if skeleton:
                model_config = AutoConfig.from_pretrained(source)
                return without_weights(
                    lambda: AutoModelForCausalLM.from_config(model_config, dtype=torch.float32, attn_implementation=attention)
                ), tokenizer
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, attn_implementation=attention)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.path {source}: cannot load a model and tokenizer: {exc}") from None
        except pickle.UnpicklingError as exc:  # a pickled .bin holding more than tensors: transformers loads weights_only
            raise ConfigError(
                f"model.path {source}: refused: {unpickling_reason(exc)}; weights are loaded as data only"
            ) from None
        return model, tokenizer
    if config.tiny is not None:
        if skeleton:
            return without_weights(lambda: build_tiny_model(config.tiny)[0]), configured_tokenizer(config)
        return build_tiny_model(config.tiny)
    raise ConfigError("[model]: set path (a save_pretrained folder) or tiny (a tiny-model config)")


def enable_checkpointing(model: Any, config: ModelConfig) -> None:
    """Recompute activations in backward when `config.gradient_checkpointing` says so."""
    if config.gradient_checkpointing:
        # transformers >= 5.23 names it activation checkpointing (the old name warns there)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False


def load_policy(config: ModelConfig, path: str | None = None) -> tuple[Any, Any, torch.device]:
    """The model (fp32 master weights, on its device), its tokenizer and the device.

    Args:
        config: the `[model]` section.
        path: load this folder instead of `config.path` / `config.tiny` (a checkpoint to resume from;
            with `config.lora`, a saved adapter loads onto the configured base model).

    Raises:
        ConfigError: when neither a path nor a tiny config is given, or the folder can't be loaded.
    """
    device = resolve_device(config.device)
    adapter = path if config.lora is not None and path is not None and is_adapter_folder(path) else None
    model, tokenizer = build_policy(config, config.path if adapter is not None else path or config.path, device)
    model.to(device)
    enable_checkpointing(model, config)
    if config.lora is not None:
        model = with_lora(model, config.lora, adapter)
    return model, tokenizer, device


def sharded_skeleton(config: ModelConfig, path: str | None, bf16: bool, device: torch.device) -> tuple[Any, Any]:
    """The model built on the meta device, sharded with FSDP2, its local shards allocated (uninitialised) on `device`;
    its buffers (rotary frequencies: small, computed from the config) whole on every rank."""
    model, tokenizer = build_policy(config, path or config.path, device, skeleton=True)
    buffers = {name: buffer.detach().clone() for name, buffer in model.named_buffers()}
    enable_checkpointing(model, config)
    model = shard_with_fsdp2(model, bf16=bf16)
    model.to_empty(device=device)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            buffer.copy_(buffers[name])
    return model, tokenizer


def broadcast_weights(model: torch.nn.Module, full: torch.nn.Module | None) -> None:
    """Fill a sharded skeleton from rank 0's whole model `full` (None on the other ranks): each rank keeps its shards.

    Buffers (rotary frequencies, persistent or not) are not sharded: rank 0 sends them whole.
    """
    state = full.state_dict() if full is not None else {}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, state, options=options)
    buffers = dict(full.named_buffers()) if full is not None else {}
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if full is not None:
                buffer.copy_(buffers[name])
            dist.broadcast(buffer, src=0)


def copy_weights(target: torch.nn.Module, source: torch.nn.Module) -> None:
    """Copy `source`'s parameters and buffers into `target` (sharded alike: each rank copies its own shards)."""
    with torch.no_grad():
        for parameter, given in zip(target.parameters(), source.parameters(), strict=True):
            parameter.copy_(given)
        for buffer, given_buffer in zip(target.buffers(), source.buffers(), strict=True):
            buffer.copy_(given_buffer)


def load_sharded_policy(
    config: ModelConfig, path: str | None, *, bf16: bool, keep_whole: bool, shards: Path | None = None
) -> tuple[Any, Any, torch.device, Any]:
    """The model sharded with FSDP2 across the default process group, loaded without a whole copy on any device.

    Every rank builds the model on the meta device and allocates only its shards. From a sharded
    checkpoint (`shards`), or a folder with safetensors weights under the model's own names, each rank
    reads its own rows (`read_model_shards`, `PretrainedRows`); else (a tiny model, pickled weights)
    rank 0 alone loads the weights (on the CPU) and sends each rank its shards. Returns the sharded model, the tokenizer,
    the device and, on rank 0 with `keep_whole`, a whole CPU model (the built-in engine's copy: from a
    sharded checkpoint the configured model's weights, which the run replaces with the checkpoint's
    before any rollout; else None).

    Args:
        config: the `[model]` section (no LoRA: refused under torchrun).
        path: load this folder instead of `config.path` / `config.tiny` (a one-process checkpoint's ``model/``).
        bf16: FSDP2's forward passes in bf16 (fp32 master weights and reductions).
        keep_whole: keep rank 0's whole model instead of freeing it.
        shards: a sharded checkpoint folder to read the weights from (`path` is then unused).
    """
    device = resolve_device(config.device)
    rank = dist.get_rank()
    if shards is not None:
        model, tokenizer = sharded_skeleton(config, None, bf16, device)
        read_model_shards(ShardFiles(shards), model, rank)
        whole = build_policy(config, config.path, device)[0] if keep_whole and rank == 0 else None
        return model, tokenizer, device, whole
    model, tokenizer = sharded_skeleton(config, path, bf16, device)
    source = path or config.path
    files = weight_files(Path(source)) if source is not None else None
    rows = PretrainedRows(files) if files is not None else None
    if rows is not None and rows.covers(model):
        rows.fill(model)
        whole = build_policy(config, source, device)[0] if keep_whole and rank == 0 else None
        return model, tokenizer, device, whole
    whole = build_policy(config, source, device)[0] if rank == 0 else None
    broadcast_weights(model, whole)
    return model, tokenizer, device, whole if keep_whole else None


def load_checkpoint_weights(model: Any, checkpoint: Path) -> Any:
    """`model` (one process) with a sharded checkpoint's weights, joined from every rank's rows."""
    read_model_shards(ShardFiles(checkpoint), model, 0)
    return model


__all__ = [
    "FLASH_ATTENTION",
    "FLASH_DTYPES",
    "attention_implementation",
    "choose_attention",
    "autocast_dtype",
    "broadcast_weights",
    "build_policy",
    "configured_tokenizer",
    "copy_weights",
    "enable_checkpointing",
    "load_checkpoint_weights",
    "load_policy",
    "load_sharded_policy",
    "resolve_device",
    "sharded_skeleton",
]
