"""Reading a checkpoint directory's weights into a state dict (safetensors, sharded or not; or PyTorch `.bin`)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor saved under `path` (``*.safetensors``, else ``pytorch_model*.bin``), on CPU.

    Raises:
        FileNotFoundError: `path` is not a directory, or holds no weight files.
    """
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a checkpoint directory")
    files = sorted(path.glob("*.safetensors"))
    state_dict: dict[str, torch.Tensor] = {}
    if files:
        for file in files:
            state_dict.update(load_file(str(file), device="cpu"))
        return state_dict
    files = sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors or pytorch_model*.bin weight files")
    for file in files:
        state_dict.update(torch.load(file, map_location="cpu", weights_only=True))
    return state_dict


__all__ = ["load_state_dict"]
