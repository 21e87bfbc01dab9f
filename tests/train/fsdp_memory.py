"""What each rank holds under FSDP2, run by ``torchrun --nproc-per-node 2 tests/train/fsdp_memory.py OUT`` (gloo on CPU).

Each rank joins the group and loads a tiny model as a run does (`RankGroup.start`,
`load_sharded_policy`: rank 0 keeps its whole load as the built-in engine's copy), takes one
step on its share, and counts the bytes of the parameters, gradients and AdamW state it holds.
Then the weights go out as a train step's command sends them with the built-in engine
(`weights_out`: streamed into rank 0's engine through `InProcessWeightSync.receiving`) while every rank watches, through weak
references, whether any whole tensor it was handed is still alive when the next one arrives.
Rank 0 writes every rank's figures and what the engine got to OUT/memory.json, for
tests/train/test_memory_ranks.py. ``fsdp_memory.py --freed-block dynamic|fixed`` prints what a
freed 16 MiB block gives back in one process, with glibc's default mmap threshold or a rank's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from fsdp_steps import SHAPE, batch, held_bytes, new_trainer  # this script's folder is on sys.path

from v1.inference import InferenceServer
from v1.inference._weight_sync import InProcessWeightSync, Streamed, WeightCopy, WeightReceiver
from v1.train import DistributedConfig, TrainConfig
from v1.train._model import load_sharded_policy
from v1.train._ranks import RankGroup, RankWorker, free_large_tensors_promptly, share_samples, weights_out


def step_and_count(trainer: Any) -> dict[str, int]:
    """One step on this rank's share; the bytes of parameters, gradients (as AdamW steps) and AdamW state it holds."""
    model, optimizer = trainer.model, trainer.optimizer
    grads: list[int] = []
    step = optimizer.step

    def counting_step(*args: Any, **kwargs: Any) -> Any:
        grads.append(held_bytes(p.grad for p in model.parameters() if p.grad is not None))
        return step(*args, **kwargs)

    optimizer.step = counting_step
    trainer.train_step(share_samples(batch(0), dist.get_world_size())[dist.get_rank()])
    optimizer.step = step
    adam = held_bytes(value for state in optimizer.state.values() for value in state.values() if value.dim() > 0)
    return {"params": held_bytes(model.parameters()), "grads": grads[0], "adam": adam}


def watching(inner: WeightReceiver | None, seen: dict[str, Any]) -> WeightReceiver:
    """`inner` (None: a receiver that drops each tensor) with a record of the tensors handed over and the most
    bytes of earlier whole tensors still alive when one arrives."""

    @contextlib.contextmanager
    def receiving() -> Iterator[WeightCopy]:
        earlier: list[weakref.ref[torch.Tensor]] = []
        with inner() if inner is not None else contextlib.nullcontext(None) as copy:

            def watch(name: str, tensor: torch.Tensor) -> None:
                alive = [ref() for ref in earlier]
                seen["alive_bytes"] = max(
                    seen["alive_bytes"],
                    sum(t.numel() * t.element_size() for t in alive if t is not None and t.data_ptr() != tensor.data_ptr()),
                )
                seen["names"].append(name)
                seen["largest_bytes"] = max(seen["largest_bytes"], tensor.numel() * tensor.element_size())
                earlier.append(weakref.ref(tensor))
                if copy is not None:
                    copy(name, tensor)

            yield watch

    return receiving


def measure(tied: bool, rank: int) -> dict[str, Any]:
    config = TrainConfig.model_validate({"model": {"tiny": {**SHAPE, "tie_word_embeddings": tied}}, "env": {"id": "x"}})
    model, tokenizer, _, whole = load_sharded_policy(config.model, None, bf16=False, keep_whole=rank == 0)
    trainer = new_trainer(model)
    figures: dict[str, Any] = step_and_count(trainer)
    server = InferenceServer(whole.eval(), tokenizer) if whole is not None else None
    seen: dict[str, Any] = {"alive_bytes": 0, "largest_bytes": 0, "names": []}
    inner: Callable[[], Any] | None = InProcessWeightSync(server).receiving if server is not None else None
    worker = RankWorker(config, model, tokenizer, trainer, Path("."), rank, weight_receiver=watching(inner, seen))
    figures["streamed"] = isinstance(weights_out(worker), Streamed)  # what a train step's command hands the sync
    figures |= {"alive_bytes": seen["alive_bytes"], "largest_bytes": seen["largest_bytes"], "names": seen["names"]}
    gathered = trainer.full_state_dict()
    if server is not None:
        served = whole.state_dict()
        figures["weight_version"] = server.weight_version
        figures["engine_differs"] = [name for name, tensor in gathered.items() if not torch.equal(served[name], tensor)]
        figures["engine_tied"] = whole.lm_head.weight is whole.model.embed_tokens.weight
        figures["state_dict_names"] = list(gathered)
    return figures


def freed_block_returned_mib() -> int:
    """MiB of RSS a freed 16 MiB block gives back, after a freed 24 MiB block raised glibc's dynamic mmap threshold."""

    def anonymous_kib() -> int:
        line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("RssAnon:"))
        return int(line.split()[1])

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(24 << 20))  # as FSDP2's freed buffers raise it
    block = libc.malloc(16 << 20)
    ctypes.memset(block, 1, 16 << 20)
    before = anonymous_kib()
    libc.free(block)
    return (before - anonymous_kib()) // 1024


def main(out: Path) -> None:
    group = RankGroup.start(DistributedConfig(backend="gloo"))
    torch.manual_seed(0)
    mine: dict[str, Any] = {"freed_block_returned_mib": freed_block_returned_mib()}
    mine |= {"untied": measure(False, group.rank), "tied": measure(True, group.rank)}
    every: list[Any] = [None] * group.world_size
    dist.all_gather_object(every, mine)
    if group.rank == 0:
        (out / "memory.json").write_text(json.dumps({"world": group.world_size, "ranks": every}))
    group.close()


if __name__ == "__main__":
    if sys.argv[1] == "--freed-block":  # one process: glibc's default threshold ("dynamic") or a rank's ("fixed")
        if sys.argv[2] == "fixed":
            assert free_large_tensors_promptly()
        print(freed_block_returned_mib())
    else:
        main(Path(sys.argv[1]))
