"""Loading the policy: a local transformers folder or a tiny model built from a config; device, dtype, attention."""

from __future__ import annotations

import importlib.util
import pickle
import re
from typing import Any

import torch

from v1.errors import ConfigError
from v1.inference.tiny import build_tiny_model
from v1.train.config import ModelConfig
from v1.train.lora import is_adapter_folder, with_lora


def resolve_device(name: str) -> torch.device:
    """``auto``: the local rank's GPU when CUDA is available, else the CPU."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def attention_implementation(config: ModelConfig, device: torch.device) -> str:
    """``flash_attention_2`` on a GPU with flash-attn installed, else ``sdpa`` (``auto``); or the configured one."""
    if config.attn_implementation != "auto":
        return config.attn_implementation
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def autocast_dtype(config: ModelConfig, device: torch.device) -> torch.dtype | None:
    """The mixed-precision dtype of forward passes: bf16 on GPUs that support it (``auto``), else none (fp32)."""
    if config.dtype == "float32" or device.type != "cuda":
        return None
    if config.dtype == "float16":
        return torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else None


def unpickling_reason(error: pickle.UnpicklingError) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one line (torch's reason, without its advice to load it unsafely)."""
    found = re.search(r"WeightsUnpickler error: ([^.\n]*)", str(error))
    return f"it holds more than tensors and plain data ({found.group(1) if found else 'not loadable as data'})"


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
    source = config.path if adapter is not None else path or config.path
    model: Any
    if source is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch.float32, attn_implementation=attention_implementation(config, device)
            )
            tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.path {source}: cannot load a model and tokenizer: {exc}") from None
        except pickle.UnpicklingError as exc:  # a pickled .bin holding more than tensors: transformers loads weights_only
            raise ConfigError(
                f"model.path {source}: refused: {unpickling_reason(exc)}; weights are loaded as data only"
            ) from None
    elif config.tiny is not None:
        model, tokenizer = build_tiny_model(config.tiny)
    else:
        raise ConfigError("[model]: set path (a save_pretrained folder) or tiny (a tiny-model config)")
    model.to(device)
    if config.gradient_checkpointing:
        # transformers >= 5.23 names it activation checkpointing (the old name warns there)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if config.lora is not None:
        model = with_lora(model, config.lora, adapter)
    return model, tokenizer, device


__all__ = ["attention_implementation", "autocast_dtype", "load_policy", "resolve_device"]
