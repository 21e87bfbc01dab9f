"""LoRA through `peft` (the ``lora`` extra): only the adapter's weights train.

The base weights stay frozen; each adapted linear layer computes ``W x + (alpha / r) B A x``.
Checkpoints save the adapter (``adapter_config.json`` + ``adapter_model.safetensors``) and a
resumed run loads it onto the configured base model. The built-in engine and ``v1 serve`` get
merged weights, ``W + (alpha / r) B A``, after each step; vLLM would take the adapter itself
(its LoRA support), which is not wired here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from v1.errors import ConfigError
from v1.train._config import LoraSection

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_folder(path: str | Path) -> bool:
    """Whether `path` holds a saved `peft` adapter (a LoRA checkpoint's ``model/``)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def is_lora(model: Any) -> bool:
    """Whether `model` is a `peft` model (without importing `peft` when it is not installed)."""
    return type(model).__module__.startswith("peft.")


def with_lora(model: Any, section: LoraSection, adapter: str | Path | None = None) -> Any:
    """`model` with LoRA adapters: new ones as `section` says, or the saved ones at `adapter`; only they train.

    Raises:
        ConfigError: `peft` is not installed.
    """
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError:
        raise ConfigError('model.lora needs peft: pip install -e ".[lora]"') from None
    if adapter is not None:
        return PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    lora = LoraConfig(
        r=section.r,
        lora_alpha=section.alpha,
        lora_dropout=section.dropout,
        target_modules=section.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The base model's weights with each adapter merged in (``W + scaling * B @ A``), under the base model's
    own names, detached on the CPU: what a weight sync sends to an engine without LoRA support."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas = {
        # every concrete LoRA layer (Linear, Embedding, Conv) defines get_delta_weight; the base class does not declare it
        f"{name}.base_layer.weight": sum(module.get_delta_weight(adapter) for adapter in module.active_adapters)  # type: ignore[attr-defined]
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer)
    }
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name:
                continue
            value = tensor + deltas[name] if name in deltas else tensor
            merged[name.replace(".base_layer.", ".")] = value.detach().to("cpu", copy=True)
    return merged


def inference_copy(model: Any) -> Any:
    """A copy of `model` for the built-in engine: a plain model with the adapters merged when `model` has LoRA."""
    if is_lora(model):
        return copy.deepcopy(model).merge_and_unload()
    return copy.deepcopy(model)


__all__ = ["ADAPTER_CONFIG", "inference_copy", "is_adapter_folder", "is_lora", "merged_state_dict", "with_lora"]
