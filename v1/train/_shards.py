"""Checkpoints written and read per rank under FSDP2: no rank gathers the model or the optimizer state whole.

A sharded checkpoint folder::

  shards/rank_R-of-W.safetensors  rank R's rows (dim 0, as FSDP2 splits them) of every parameter ("model.NAME")
                                  and of its AdamW moments ("optim.NAME.exp_avg", "optim.NAME.exp_avg_sq"); every
                                  buffer and step count whole ("model.BUFFER", "optim.NAME.step")
  hf/                             the model's config and tokenizer (rank 0): what `export_checkpoint` names the weights with
  trainer.json                    the step and the optimizer settings and schedule it trained with
  run.json                        written last (`RankWorker.save`)

Each rank writes its own file (`write_shard`). Reading (`ShardFiles`) fills each rank's own rows from
the files that hold them, under any number of ranks or in one process: under the number of ranks that
wrote it, each rank opens its own file only. `export_checkpoint` joins the shards into one Hugging Face folder.
Safetensors files hold tensors only, and every name and shape read is checked against the model.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.tensor import DTensor, Shard

from v1.errors import ConfigError
from v1.inference import SafetensorsWriter

SHARDS = "shards"
HF = "hf"
TRAINER_STATE = "trainer.json"
SHARD_FILE = re.compile(r"^rank_(\d{1,5})-of-(\d{1,5})\.safetensors$")
MOMENTS = ("exp_avg", "exp_avg_sq")
"""The AdamW state split by rows like its parameter; its ``step`` count is whole."""


def shard_path(folder: Path, rank: int, world: int) -> Path:
    return folder / SHARDS / f"rank_{rank}-of-{world}.safetensors"


def is_sharded_checkpoint(folder: Path) -> bool:
    """Whether `folder` is a checkpoint written per rank (`write_shard`), not a one-process ``model/`` + ``trainer.pt``."""
    return (folder / SHARDS).is_dir()


def rows_of(rank: int, world: int, length: int) -> tuple[int, int]:
    """The rows `[start, end)` of a dim-0 `length` that FSDP2 gives `rank` of `world` (``torch.chunk``'s split)."""
    size = math.ceil(length / world) if length else 0
    start = min(rank * size, length)
    return start, min(start + size, length)


def local_rows(tensor: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """The part of `tensor` this rank holds and its rows of the whole: a DTensor's local shard, else all of it."""
    if isinstance(tensor, DTensor):
        if tuple(tensor.placements) != (Shard(0),):
            raise ValueError(f"expected FSDP2's dim-0 shards, not {tensor.placements}")
        mesh = tensor.device_mesh
        start, end = rows_of(mesh.get_local_rank(), mesh.size(), tensor.shape[0])
        return tensor.to_local(), start, end
    return tensor, 0, tensor.shape[0] if tensor.dim() else 0


def unique_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """Each parameter (under its first name: a tied one once) and buffer, non-persistent ones included; whether a parameter."""
    for name, parameter in model.named_parameters():
        yield name, parameter, True
    for name, buffer in model.named_buffers():
        yield name, buffer, False


def write_shard(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int, world: int) -> Path:
    """This rank's rows of the parameters and of their AdamW moments, and every buffer and step count whole,
    as its own safetensors file, written one tensor at a time (every rank calls this: the optimizer state is read
    through a collective-free sharded state dict)."""
    state: Any = get_optimizer_state_dict(model, optimizer)
    with SafetensorsWriter(shard_path(folder, rank, world)) as writer:
        for name, tensor, _ in unique_tensors(model):
            writer.add(f"model.{name}", local_rows(tensor.detach())[0])
        for name, entry in state["state"].items():
            for key, value in entry.items():
                writer.add(f"optim.{name}.{key}", local_rows(value)[0] if key in MOMENTS else value)
    return shard_path(folder, rank, world)


class ShardFiles:
    """The shard files of a checkpoint, opened only when a row they hold is read.

    Args:
        folder: the checkpoint folder (with ``shards/``).

    Raises:
        ConfigError: no shard files, or not one file for each rank of one world size.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        found = [SHARD_FILE.match(path.name) for path in sorted((folder / SHARDS).iterdir())]
        worlds = {int(match.group(2)) for match in found if match}
        ranks = sorted(int(match.group(1)) for match in found if match)
        if len(worlds) != 1 or ranks != list(range(next(iter(worlds)))) or len(found) != len(ranks):
            raise ConfigError(
                f"--resume: {folder / SHARDS}: expected rank_R-of-W.safetensors for each rank R of one W, and nothing else"
            )
        self.world = next(iter(worlds))
        self.opened: dict[int, Any] = {}
        self.bytes_read = 0

    def _file(self, rank: int) -> Any:
        if rank not in self.opened:
            path = shard_path(self.folder, rank, self.world)
            try:
                self.opened[rank] = safe_open(str(path), framework="pt", device="cpu")
            except (OSError, SafetensorError) as exc:
                raise ConfigError(f"--resume: {path}: not a safetensors file: {str(exc)[:200]}") from None
        return self.opened[rank]

    def _read(self, rank: int, name: str, rows: slice | None, shape: tuple[int, ...]) -> torch.Tensor:
        """`name`'s `rows` (None: all of it) from `rank`'s file, checked to have `shape`."""
        path = shard_path(self.folder, rank, self.world)
        try:
            stored = self._file(rank).get_slice(name)
            value = stored[rows] if rows is not None else stored[:] if stored.get_shape() else self._file(rank).get_tensor(name)
        except SafetensorError as exc:
            raise ConfigError(f"--resume: {path}: {name}: {str(exc)[:200]}") from None
        if tuple(value.shape) != shape:
            raise ConfigError(f"--resume: {path}: {name} has shape {list(value.shape)}, the model's needs {list(shape)}")
        self.bytes_read += value.numel() * value.element_size()
        return value

    def rows(self, name: str, whole: torch.Size, start: int, end: int) -> torch.Tensor:
        """Rows `[start, end)` of the tensor `name` whose whole shape is `whole`, from each file that holds some."""
        parts = []
        for rank in range(self.world):
            held_start, held_end = rows_of(rank, self.world, whole[0])
            low, high = max(start, held_start), min(end, held_end)
            if low < high:
                parts.append(self._read(rank, name, slice(low - held_start, high - held_start), (high - low, *whole[1:])))
        if not parts:
            return torch.empty((0, *whole[1:]))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def whole(self, name: str, shape: torch.Size, rank: int) -> torch.Tensor:
        """A tensor every file holds whole (a buffer, a step count): from `rank`'s own file when there is one."""
        return self._read(min(rank, self.world - 1), name, None, tuple(shape))

    def fill(self, name: str, target: torch.Tensor, sharded: bool, rank: int) -> None:
        """Copy `name` into `target` (this rank's rows of it when `sharded`)."""
        local, start, end = local_rows(target)
        with torch.no_grad():
            if sharded and target.dim():
                local.copy_(self.rows(name, target.shape, start, end))
            else:
                local.copy_(self.whole(name, target.shape, rank))


def read_model_shards(files: ShardFiles, model: torch.nn.Module, rank: int) -> None:
    """Fill `model`'s parameters (this rank's rows) and buffers from `files`."""
    for name, tensor, is_parameter in unique_tensors(model):
        files.fill(f"model.{name}", tensor, is_parameter, rank)


def read_optimizer_shards(files: ShardFiles, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> None:
    """Fill `optimizer`'s moments (this rank's rows) and step counts from `files`; its settings stay its own."""
    state: Any = get_optimizer_state_dict(model, optimizer)  # the state laid out (zeros), the groups this optimizer's
    for name, entry in state["state"].items():
        for key, value in entry.items():
            files.fill(f"optim.{name}.{key}", value, key in MOMENTS, rank)
    set_optimizer_state_dict(model, optimizer, state)


def write_trainer_state(folder: Path, step: int, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """``trainer.json``: the step, and the settings and schedule the run trained with (checked on resume)."""
    groups = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.state_dict()["param_groups"]]
    state = {
        "step": step,
        "optimizer": {"state": {}, "param_groups": groups},
        "scheduler": {"base_lrs": scheduler.base_lrs, "last_epoch": scheduler.last_epoch},
    }
    (folder / TRAINER_STATE).write_text(json.dumps(state, default=float), encoding="utf-8")


def read_trainer_state_json(path: Path) -> dict[str, Any]:
    """``trainer.json`` as `write_trainer_state` writes it.

    Raises:
        ConfigError: not a JSON object with ``step``, ``optimizer`` and ``scheduler``.
    """
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"--resume: {path}: not readable as JSON: {str(exc)[:200]}") from None
    if not isinstance(state, dict) or any(field not in state for field in ("step", "optimizer", "scheduler")):
        raise ConfigError(f"--resume: {path}: not a trainer state this v1 wrote (expected step, optimizer, scheduler)")
    return state


def whole_tensors(files: ShardFiles, names: list[tuple[str, torch.Size, bool]]) -> Iterator[tuple[str, torch.Tensor]]:
    """Each of `names` (name, whole shape, whether split by rows) joined whole, one at a time."""
    for name, shape, sharded in names:
        yield (
            name,
            files.rows(f"model.{name}", shape, 0, shape[0]) if sharded and len(shape) else files.whole(f"model.{name}", shape, 0),
        )


def export_checkpoint(checkpoint: Path, out: Path) -> Path:
    """A sharded checkpoint as one Hugging Face folder at `out` (``model.safetensors``, config, tokenizer), one tensor
    in memory at a time; a one-process checkpoint's ``model/`` is copied as it is.

    Raises:
        ConfigError: `checkpoint` is not a checkpoint folder, or `out` exists and is not an empty folder.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"v1 train export: {out}: exists and is not an empty folder; name a new one")
    if not is_sharded_checkpoint(checkpoint):
        if not (checkpoint / "model" / "config.json").is_file():
            raise ConfigError(f"v1 train export: {checkpoint}: not a checkpoint (expected shards/ or model/ in it)")
        shutil.copytree(checkpoint / "model", out, dirs_exist_ok=True)
        return out
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(checkpoint / HF)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"v1 train export: {checkpoint / HF}: no model config: {str(exc)[:200]}") from None
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    names = [(name, tensor.shape, is_parameter) for name, tensor, is_parameter in unique_tensors(skeleton)]
    persistent = set(skeleton.state_dict())
    files = ShardFiles(checkpoint)
    shutil.copytree(checkpoint / HF, out, dirs_exist_ok=True)
    with SafetensorsWriter(out / "model.safetensors") as writer:
        for name, tensor in whole_tensors(files, [entry for entry in names if entry[0] in persistent]):
            writer.add(name, tensor)
    return out


__all__ = [
    "HF",
    "ShardFiles",
    "export_checkpoint",
    "is_sharded_checkpoint",
    "read_model_shards",
    "read_optimizer_shards",
    "read_trainer_state_json",
    "rows_of",
    "shard_path",
    "write_shard",
    "write_trainer_state",
]
