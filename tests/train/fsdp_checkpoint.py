"""Sharded checkpoints and the streamed file sync, run by ``torchrun --nproc-per-node 2 tests/train/fsdp_checkpoint.py OUT``.

Each rank loads the tiny model sharded (as a run does), takes a step, saves a checkpoint (`RankWorker.save`) and
streams the weights into a file sync's folder (`weights_out` with `HTTPWeightSync.receiving`, bf16), while
torch's profiler counts the CPU bytes each of those allocates on this rank (the largest single buffer, and the
most alive at once: exact where no collective runs, an over-count where gloo frees on threads of its own) and
weak references see whether any whole tensor the sync was handed is still alive when the next one arrives. Then a fresh sharded model and trainer read the checkpoint back (recording which files each
rank opened and the bytes it read) and both the saver and the resumed trainer take one more step on the same
samples. Last, each rank loads a save_pretrained folder as a fresh run does (its own rows, read from the file).
Rank 0 writes every rank's figures, the gathered weights after step 1 and after both step 2s to OUT,
for tests/train/test_checkpoint_shards.py.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from fsdp_memory import watching  # this script's folder is on sys.path
from fsdp_steps import batch, new_trainer
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.profiler import ProfilerActivity, profile

from v1.inference import Streamed, build_tiny_model
from v1.inference._weight_sync import HTTPWeightSync
from v1.train import DistributedConfig, TrainConfig
from v1.train._model import load_sharded_policy, sharded_skeleton
from v1.train._pretrained import PretrainedRows, weight_files
from v1.train._ranks import RankGroup, RankWorker, share_samples, weights_out
from v1.train._shards import ShardFiles, read_model_shards, read_optimizer_shards

SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2}


@contextlib.contextmanager
def allocations(figures: dict[str, Any], key: str, mapped: tuple[int, ...] = ()) -> Iterator[None]:
    """Record under `key` the largest CPU buffer torch allocated inside the block and the most bytes alive at once.

    A storage of exactly one of the `mapped` sizes, made outside any op, is safetensors mapping that file (its pages
    are read on demand, the rows read count them: `PretrainedRows.bytes_read`): it is counted under "mapped" instead."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        yield
    events = sorted(recorded.events(), key=lambda event: event.time_range.start)
    alive = peak = largest = 0
    maps = []
    for event in events:
        change = event.self_cpu_memory_usage
        if event.name == "[memory]" and abs(change) in mapped:
            maps.append(change)
            continue
        alive += change
        peak = max(peak, alive)
        largest = max(largest, change)
    figures[key] = {"largest": largest, "peak": peak, "mapped": max(maps, default=0)}


def from_pretrained_folder(config: TrainConfig, folder: Path, rank: int, figures: dict[str, Any]) -> dict[str, Any]:
    """A fresh run's load of a save_pretrained folder (bf16 safetensors): the CPU bytes it allocates and reads on this
    rank, and (gathered) the weights and buffers it loaded."""
    if rank == 0:
        saved, tokenizer = build_tiny_model({**SHAPE, "seed": 7})
        saved.to(torch.bfloat16).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    dist.barrier()
    model_config = config.model.model_copy(update={"tiny": None, "path": str(folder)})
    file_bytes = (folder / "model.safetensors").stat().st_size
    with allocations(figures, "pretrained_load", mapped=(file_bytes,)):
        loaded = load_sharded_policy(model_config, None, bf16=False, keep_whole=False)[0]
    rows = PretrainedRows(weight_files(folder) or {})
    rows.fill(sharded_skeleton(model_config, None, False, torch.device("cpu"))[0])
    figures["pretrained_bytes_read"] = rows.bytes_read
    figures["pretrained_file_bytes"] = file_bytes
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    gathered = get_model_state_dict(loaded, options=options)
    return {"pretrained": gathered, "pretrained_buffers": {name: buffer for name, buffer in loaded.named_buffers()}}


def main(out: Path) -> None:
    group = RankGroup.start(DistributedConfig(backend="gloo"))
    rank, world = group.rank, group.world_size
    torch.manual_seed(0)
    config = TrainConfig.model_validate({"model": {"tiny": SHAPE}, "env": {"id": "x"}, "output_dir": str(out / "run")})
    model, tokenizer, device, _ = load_sharded_policy(config.model, None, bf16=False, keep_whole=False)
    whole_fp32 = sum(parameter.numel() for parameter in model.parameters()) * 4
    trainer = new_trainer(model)
    worker = RankWorker(config, model, tokenizer, trainer, out / "run", rank, ["Qwen2ForCausalLM"])
    figures: dict[str, Any] = {"whole_fp32_bytes": whole_fp32}
    with allocations(figures, "step"):
        trainer.train_step(share_samples(batch(0), world)[rank])
    with allocations(figures, "save"):
        checkpoint = worker.save(1, {"cursor": 0, "pending": []})
    sync = HTTPWeightSync("http://127.0.0.1:9/v1", out / "synced", dtype=torch.bfloat16)
    seen: dict[str, Any] = {"alive_bytes": 0, "largest_bytes": 0, "names": []}
    worker.weight_receiver = watching(sync.receiving if rank == 0 else None, seen)
    with allocations(figures, "sync"):
        figures["streamed"] = isinstance(weights_out(worker), Streamed)
    figures["sync_alive_bytes"] = seen["alive_bytes"]
    after_one = trainer.full_state_dict()

    files = ShardFiles(checkpoint)
    resumed_model = sharded_skeleton(config.model, None, False, device)[0]
    read_model_shards(files, resumed_model, rank)
    probe = new_trainer(resumed_model)
    read_optimizer_shards(files, resumed_model, probe.optimizer, rank)
    figures["opened"] = sorted(files.opened)
    figures["bytes_read"] = files.bytes_read
    figures["own_file_bytes"] = (checkpoint / "shards" / f"rank_{rank}-of-{world}.safetensors").stat().st_size

    resumed = new_trainer(resumed_model)
    resumed.load(checkpoint)
    figures["resumed_step"] = resumed.step
    samples = share_samples(batch(1), world)[rank]
    trainer.train_step(samples)
    resumed.train_step(samples)
    going, back = trainer.full_state_dict(), resumed.full_state_dict()
    pretrained = from_pretrained_folder(config, out / "pretrained", rank, figures)
    every: list[Any] = [None] * world
    dist.all_gather_object(every, figures)
    if rank == 0:
        torch.save({"after_one": after_one, "going": going, "back": back, **pretrained}, out / "weights.pt")
        (out / "report.json").write_text(
            json.dumps({"world": world, "shape": SHAPE, "checkpoint": str(checkpoint), "ranks": every})
        )
    group.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
