"""The ranks of a training run: one process, or several under ``torchrun`` with FSDP2.

Rank 0 leads: it runs the orchestrator (and the built-in inference server, or talks to
an external one), evaluates, and writes the outputs. Every rank holds a shard of the
model and trains on its share of each step's samples. The ranks stay in step through
commands: before each operation that needs every rank (an SFT warm-up, a train step,
gathering the weights, a checkpoint), rank 0 scatters one command per rank (each with
that rank's share of the samples) over a gloo group, then runs its own; the other ranks
wait for their command, run it, and wait for the next until rank 0 says stop. One
process is the same code with a group of one, where scattering is a no-op.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from v1.errors import ConfigError, Error
from v1.inference import SafetensorsWriter, Streamed, WeightReceiver
from v1.train._batch import Sample
from v1.train._config import DistributedConfig, TrainConfig
from v1.train._logprobs import is_sharded
from v1.train._lora import is_lora
from v1.train._outputs import checkpoint_dir, write_json
from v1.train._shards import HF
from v1.train._trainer import PolicyTrainer

TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
"""The environment ``torchrun`` sets for each process; their presence means a multi-process run."""


class LeaderFailed(Error):
    """Raised on the ranks other than 0 when rank 0 stopped the run because it failed."""


def under_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (its rank variables are set)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def backend_for(config: DistributedConfig) -> str:
    """The process group's backend: nccl on CUDA, gloo on CPU (``auto``), or the configured one.

    Raises:
        ConfigError: nccl without a CUDA GPU.
    """
    if config.backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("distributed.backend = 'nccl' needs CUDA GPUs; use 'gloo' or 'auto' on CPU")
    if config.backend != "auto":
        return config.backend
    return "nccl" if torch.cuda.is_available() else "gloo"


MMAP_THRESHOLD_BYTES = 4 * 2**20
"""Host allocations from this size up get pages of their own on CPU ranks (`free_large_tensors_promptly`)."""

M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number for the mmap threshold."""


def free_large_tensors_promptly() -> bool:
    """Have glibc give every allocation of `MMAP_THRESHOLD_BYTES` or more pages of its own, returned when freed; whether it could.

    FSDP2 on CPU allocates and frees whole-layer buffers of many sizes every step (all-gathers,
    gradients before their reduce-scatter). glibc raises its mmap threshold to the largest block
    freed (up to 32 MiB), so such buffers then come from the heap, whose freed memory a process
    keeps and fragments: at 2 ranks of a 404 MiB (fp32) model a rank's step peaked at 2,368 MiB
    of RSS, 1,831 MiB with a fixed threshold (`benchmarks/train_memory_ranks.py`). Not glibc:
    nothing changes.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def share_samples(samples: Sequence[Sample], ranks: int) -> list[list[Sample]]:
    """`samples` split into `ranks` shares of about equal token counts (longest first, each to the lightest share)."""
    shares: list[list[Sample]] = [[] for _ in range(ranks)]
    loads = [0] * ranks
    for sample in sorted(samples, key=lambda item: len(item.input_ids), reverse=True):
        lightest = loads.index(min(loads))
        shares[lightest].append(sample)
        loads[lightest] += len(sample.input_ids)
    return shares


def sft_batches(samples: Sequence[Sample], steps: int, batch_size: int, seed: int) -> list[list[Sample]]:
    """The batches of `steps` SFT steps, drawn (seeded) from `samples`."""
    rng = random.Random(seed)
    return [rng.sample(list(samples), min(batch_size, len(samples))) for _ in range(steps)]


@dataclass
class RankWorker:
    """What each rank holds and does: its trainer (over its shard of the model) and the run's config."""

    config: TrainConfig
    model: Any
    tokenizer: Any
    trainer: PolicyTrainer
    output_dir: Path
    rank: int = 0
    architectures: list[str] | None = None
    weight_receiver: WeightReceiver | None = None
    """Rank 0 with the built-in engine under FSDP2: opens a streamed update of the engine's weights (`streams_weights`)."""

    @property
    def streams_weights(self) -> bool:
        """Whether a weight sync streams the weights one whole tensor at a time into rank 0's engine or weights file
        (`stream_weights`): every sync but vLLM's NCCL broadcast, for every model but a LoRA one (whose merged weights
        are built whole); every rank decides alike from the config."""
        return not is_lora(self.model) and self.config.inference.weight_sync != "vllm_nccl"

    def sft(self, batches: list[list[Sample]]) -> list[dict[str, float]]:
        """SFT warm-up steps on this rank's share of each batch, with their own optimizer (the RL one is untouched).

        The KL reference (when there is one) becomes the warmed-up policy: RL is anchored where it starts.
        """
        warmup = PolicyTrainer.from_config(
            self.config.for_sft(), self.model, self.tokenizer, autocast_dtype=self.trainer.autocast_dtype
        )
        history = [warmup.train_step(batch) for batch in batches]
        self.trainer.anchor_reference()
        return history

    def save_model(self, folder: Path) -> Path:
        """The model and tokenizer as a ``save_pretrained`` folder (a collective under FSDP2: every rank gathers one
        tensor at a time, rank 0 writes each before the next: `PolicyTrainer.whole_weights`)."""
        if not is_sharded(self.model):
            if self.rank == 0:
                self.model.save_pretrained(folder)
                self.tokenizer.save_pretrained(folder)
            return folder
        with SafetensorsWriter(folder / "model.safetensors") if self.rank == 0 else contextlib.nullcontext() as writer:
            for name, tensor in self.trainer.whole_weights():
                if writer is not None:
                    writer.add(name, tensor)
                del tensor
        if self.rank == 0:
            self.save_config(folder)
        return folder

    def save_config(self, folder: Path) -> None:
        """The model's config (its own class name: a sharded model's class is FSDP's subclass) and tokenizer."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.architectures is not None:
            self.model.config.architectures = self.architectures
        self.model.config.save_pretrained(folder)
        if getattr(self.model, "generation_config", None) is not None:
            self.model.generation_config.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)

    def save(self, step: int, run_state: dict[str, Any]) -> Path:
        """Checkpoint `step` (a collective under FSDP2) and write ``run.json`` last (rank 0): a folder without it is
        ignored, so a run killed mid-save resumes from the one before.

        Under FSDP2 each rank writes its own shard of the model and optimizer state (`PolicyTrainer.save`) and rank
        0 the model's config and tokenizer (``hf/``: `v1 train export` makes it one folder); in one process the
        model is a ``save_pretrained`` folder (``model/``) beside ``trainer.pt``.
        """
        folder = checkpoint_dir(self.output_dir, step)
        if is_sharded(self.model):
            self.trainer.save(folder)
            if self.rank == 0:
                self.save_config(folder / HF)
            dist.barrier()  # every rank's file is whole before run.json marks the checkpoint complete
        else:
            self.save_model(folder / "model")
            self.trainer.save(folder)
        if self.rank == 0:
            write_json(folder / "run.json", {"step": step, **run_state})
        return folder


def weights_for_sync(trainer: PolicyTrainer) -> dict[str, torch.Tensor]:
    """What a weight sync sends after a command: in one process on the CPU, the trainer's own tensors, not copied;
    else `PolicyTrainer.full_state_dict` (gathered under FSDP2, merged with LoRA, moved off a GPU).

    Not copying is safe because every sync finishes before the trainer's next step (the run awaits
    each push): the built-in engine copies them into its own model, the file syncs write them out.
    It saves a full fp32 copy of the model per step (2 GB and 1.9 s at Qwen2.5-0.5B's shape on 2 busy cores).
    """
    if is_sharded(trainer.model) or is_lora(trainer.model) or trainer.device.type != "cpu":
        return trainer.full_state_dict()
    return {name: tensor.detach() for name, tensor in trainer.model.state_dict().items()}


def stream_weights(trainer: PolicyTrainer, receiver: WeightReceiver | None) -> Streamed:
    """Every rank gathers the weights one tensor at a time (`PolicyTrainer.whole_weights`); rank 0 hands each to
    its engine's `receiver` as it arrives, so no rank holds more than one whole tensor (never a whole state dict).

    Every rank runs every gather to the end even when rank 0's copy fails (then rank 0 raises after the
    last one), so no rank is left waiting in a collective.

    Raises:
        ValueError: on rank 0, the engine refused a tensor (a name or shape its model lacks).
    """
    receiving = receiver() if receiver is not None else contextlib.nullcontext(None)
    failed: ValueError | None = None
    with receiving as copy:
        for name, tensor in trainer.whole_weights():
            if copy is not None and failed is None:
                try:
                    copy(name, tensor)
                except ValueError as exc:
                    failed = exc
            del tensor  # before the next gather: one whole tensor at a time
    if failed is not None:
        raise failed
    return Streamed()


def weights_out(worker: RankWorker) -> dict[str, torch.Tensor]:
    """What a command hands the weight sync: `Streamed` when they were streamed into rank 0's engine, else
    `weights_for_sync`'s state dict (rank 0's; the other ranks' is empty)."""
    if worker.streams_weights:
        return stream_weights(worker.trainer, worker.weight_receiver)
    return weights_for_sync(worker.trainer)


class Command(Protocol):
    def apply(self, worker: RankWorker) -> Any:
        """Run this rank's part; rank 0 gets the result."""
        ...


@dataclass
class SFTCommand:
    batches: list[list[Sample]]

    def apply(self, worker: RankWorker) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
        history = worker.sft(self.batches)
        return history, weights_out(worker)


@dataclass
class TrainCommand:
    samples: list[Sample]
    weight: float = 1.0

    def apply(self, worker: RankWorker) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
        stats = worker.trainer.train_step(self.samples, weight=self.weight)
        return stats, weights_out(worker)


@dataclass
class GatherCommand:
    def apply(self, worker: RankWorker) -> dict[str, torch.Tensor]:
        return weights_out(worker)


@dataclass
class SaveModelCommand:
    """Every rank: the model as a ``save_pretrained`` folder (the vLLM engine's first weights)."""

    folder: Path

    def apply(self, worker: RankWorker) -> Path:
        return worker.save_model(self.folder)


@dataclass
class SaveCommand:
    step: int
    run_state: dict[str, Any] = field(default_factory=dict)

    def apply(self, worker: RankWorker) -> Path:
        return worker.save(self.step, self.run_state)


@dataclass
class StopCommand:
    failed: bool = False

    def apply(self, worker: RankWorker) -> None:
        return None


class RankGroup:
    """This process's place in the run: rank, world size, and the command channel from rank 0.

    Build it with `RankGroup.start` (joins torchrun's process group when torchrun started this
    process) or `RankGroup.single()`; `close` leaves the group.
    """

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0, control: Any = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.control = control

    @classmethod
    def single(cls) -> RankGroup:
        return cls()

    @classmethod
    def start(cls, config: DistributedConfig) -> RankGroup:
        """Join torchrun's process group (nccl or gloo) when this process runs under torchrun, else a group of one.

        Raises:
            ConfigError: a bad backend for this machine, or torchrun's variables are not integers.
        """
        if not under_torchrun():
            return cls.single()
        backend = backend_for(config)
        try:
            rank, world_size, local_rank = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        except ValueError:
            raise ConfigError("torchrun's RANK, WORLD_SIZE and LOCAL_RANK must be integers") from None
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        if backend == "gloo":
            free_large_tensors_promptly()
        timeout = datetime.timedelta(seconds=config.timeout_s)
        dist.init_process_group(backend, timeout=timeout)
        # commands go over gloo: the other ranks wait on it while rank 0 generates, without tying up a GPU stream
        control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
        return cls(rank, world_size, local_rank, control)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.control is not None

    def run(self, commands: Sequence[Command], worker: RankWorker) -> Any:
        """Rank 0: send each rank its command (one per rank), then run its own and return the result."""
        if self.distributed:
            dist.scatter_object_list([None], list(commands), src=0, group=self.control)
        return commands[0].apply(worker)

    def run_all(self, command: Command, worker: RankWorker) -> Any:
        """Rank 0: the same command on every rank."""
        return self.run([command] * self.world_size, worker)

    def follow(self, worker: RankWorker) -> None:
        """Ranks other than 0: run rank 0's commands until it says stop.

        Raises:
            LeaderFailed: rank 0 stopped because it failed.
        """
        while True:
            received: list[Any] = [None]
            dist.scatter_object_list(received, None, src=0, group=self.control)
            command = received[0]
            if isinstance(command, StopCommand):
                if command.failed:
                    raise LeaderFailed(f"rank {self.rank}: rank 0 stopped the run after an error (see its output)")
                return
            command.apply(worker)

    def stop(self, worker: RankWorker, failed: bool = False) -> None:
        """Rank 0: tell the other ranks the run is over."""
        if self.distributed:
            self.run_all(StopCommand(failed), worker)

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


__all__ = [
    "TORCHRUN_VARIABLES",
    "GatherCommand",
    "LeaderFailed",
    "RankGroup",
    "RankWorker",
    "SFTCommand",
    "SaveCommand",
    "SaveModelCommand",
    "StopCommand",
    "TrainCommand",
    "backend_for",
    "free_large_tensors_promptly",
    "sft_batches",
    "share_samples",
    "stream_weights",
    "under_torchrun",
    "weights_for_sync",
    "weights_out",
]
