"""Trainer steps under FSDP2, run by ``torchrun --nproc-per-node 2 tests/train/fsdp_steps.py OUT`` (gloo on CPU).

Each rank trains on its share (`share_samples`) of the same batches a single process
would train on whole: two steps, a checkpoint written through the collective save, then
a fresh sharded model and trainer that load it and take a third step. Rank 0 writes the
gathered weights after steps 2 and 3 and the step statistics to OUT, for
tests/train/test_distributed.py to compare with one process.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.distributed as dist

from v1.inference import build_tiny_model
from v1.train import LossConfig, OptimConfig, Sample
from v1.train._ranks import share_samples
from v1.train._trainer import PolicyTrainer, shard_with_fsdp2

SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
MICRO_BATCH_SIZE = 2


def batch(step: int) -> list[Sample]:
    """Five samples of different lengths (so the two shares need different numbers of micro-batches)."""
    rng = random.Random(step)
    samples = []
    for index in range(5):
        prompt, completion = 4 + index, 2 + index % 3
        mask = [0] * prompt + [1] * completion
        ids = [rng.randrange(3, 200) for _ in mask]
        logprobs = [rng.uniform(-6.0, -4.0) * m for m in mask]
        samples.append(Sample(ids, mask, logprobs, [rng.choice((-1.0, 0.5, 1.0)) * m for m in mask]))
    return samples


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of `tensors` this rank holds (a DTensor's local shard)."""
    total = 0
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


def new_trainer(model: torch.nn.Module) -> PolicyTrainer:
    return PolicyTrainer(
        model, LossConfig(kind="grpo"), OptimConfig(lr=1e-2, max_grad_norm=0.5), max_steps=3, micro_batch_size=MICRO_BATCH_SIZE
    )


def sharded_trainer(weights: Path | None = None) -> PolicyTrainer:
    """A trainer over a tiny model (the weights in `weights` when given: a resumed run loads its checkpoint, then shards)."""
    model, _ = build_tiny_model(SHAPE)
    if weights is not None:
        model.load_state_dict(torch.load(weights, weights_only=True))
    return new_trainer(shard_with_fsdp2(model, bf16=False))


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    trainer = sharded_trainer()
    stats = [trainer.train_step(share_samples(batch(step), world)[rank]) for step in range(2)]
    trainer.save(out / "checkpoint")
    after_two = trainer.full_state_dict()
    if rank == 0:
        torch.save(after_two, out / "checkpoint" / "model.pt")
    dist.barrier()
    resumed = sharded_trainer(out / "checkpoint" / "model.pt")
    resumed.load(out / "checkpoint")
    stats.append(resumed.train_step(share_samples(batch(2), world)[rank]))
    after_three = resumed.full_state_dict()
    if rank == 0:
        torch.save({"after_two": after_two, "after_three": after_three}, out / "weights.pt")
        (out / "stats.json").write_text(json.dumps({"world": world, "step": resumed.step, "stats": stats}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
