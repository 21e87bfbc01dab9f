"""A Hugging Face folder's safetensors weights, read per rank: each rank reads only its own rows.

A fresh FSDP2 run builds the model on the meta device on every rank and allocates only its shards
(`v1.train._model.sharded_skeleton`). `PretrainedRows` then fills each rank's rows of every parameter
straight from the folder's ``model.safetensors`` (or the files its ``model.safetensors.index.json``
names), converted to the parameter's dtype one slice at a time: no rank, rank 0 included, holds a
whole copy of the weights, in any dtype. Folders it can't read by name (pickled ``.bin`` weights,
names the model doesn't use) are left to rank 0's load and broadcast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from v1.errors import ConfigError
from v1.train._shards import local_rows, unique_tensors

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def weight_files(folder: Path) -> dict[str, Path] | None:
    """Each tensor name of a save_pretrained folder's safetensors weights and the file holding it; None without them.

    Raises:
        ConfigError: an index that is not a weight map of file names inside `folder`.
    """
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ConfigError(f"model.path {folder}: {INDEX} is not a weight map: {str(exc)[:200]}") from None
        if not isinstance(weight_map, dict) or not all(
            isinstance(name, str) and isinstance(file, str) and Path(file).name == file for name, file in weight_map.items()
        ):
            raise ConfigError(f"model.path {folder}: {INDEX}: weight_map must map names to file names in the folder")
        return {name: folder / file for name, file in weight_map.items()}
    single = folder / WEIGHTS
    if not single.is_file():
        return None
    return dict.fromkeys(_opened(single).keys(), single)


def _opened(path: Path) -> Any:
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except (OSError, SafetensorError) as exc:
        raise ConfigError(f"model.path {path}: not a safetensors file: {str(exc)[:200]}") from None


class PretrainedRows:
    """Reads each rank's rows of a model's parameters from its save_pretrained folder.

    Args:
        files: `weight_files`' map of tensor names to files.
    """

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.opened: dict[Path, Any] = {}
        self.bytes_read = 0

    def covers(self, model: torch.nn.Module) -> bool:
        """Whether the files hold every parameter of `model` under its own name (buffers may be computed instead)."""
        return all(name in self.files for name, _, is_parameter in unique_tensors(model) if is_parameter)

    def fill(self, model: torch.nn.Module) -> None:
        """Copy this rank's rows of every parameter, and every buffer the files hold, into `model`.

        Raises:
            ConfigError: a tensor whose stored shape is not the model's.
        """
        for name, target, is_parameter in unique_tensors(model):
            if is_parameter or name in self.files:
                self._fill_one(name, target, is_parameter)
        self.opened.clear()

    def _fill_one(self, name: str, target: torch.Tensor, sharded: bool) -> None:
        path = self.files[name]
        if path not in self.opened:
            self.opened[path] = _opened(path)
        stored = self.opened[path].get_slice(name)
        if list(stored.get_shape()) != list(target.shape):
            raise ConfigError(f"model.path {path}: {name} has shape {stored.get_shape()}, the model's is {list(target.shape)}")
        local, start, end = local_rows(target)
        try:
            value = (
                stored[start:end]
                if sharded and target.dim()
                else stored[:]
                if target.dim()
                else self.opened[path].get_tensor(name)
            )
        except SafetensorError as exc:
            raise ConfigError(f"model.path {path}: {name}: {str(exc)[:200]}") from None
        self.bytes_read += value.numel() * value.element_size()
        with torch.no_grad():
            local.copy_(value.to(local.dtype))


__all__ = ["PretrainedRows", "weight_files"]
