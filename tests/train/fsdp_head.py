"""The chunked output head and the shared-prefix forward of an FSDP2-sharded model, run by
``torchrun --nproc-per-node N tests/train/fsdp_head.py OUT`` (gloo on CPU, N = 1 or 2).

For a tiny model with tied and with separate embeddings, each rank computes log-probabilities
of its share of a batch both ways (`token_logprobs`, `shared_prefix_logprobs`) on the sharded
model and back-propagates their sum; it compares them with the unsharded model on the same
share, the gathered gradients with the unsharded model's over the whole batch, and one
trainer step with shared prefixes, whose weights it saves (OUT/step_weights.pt) for the test to
compare with one unsharded step on the whole batch. It records the
largest differences and the rank of every input the output head saw (2: flat chunks of hidden
states; 3: the model's own ``[B, T, H]`` forward). Rank 0 writes them to OUT/head.json for
tests/train/test_distributed.py.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from v1.inference import build_tiny_model
from v1.train import LossConfig, OptimConfig
from v1.train._batch import Sample, collate
from v1.train._logprobs import shared_prefix_logprobs, token_logprobs
from v1.train._ranks import share_samples
from v1.train._shared_prefix import shared_prefix_batch
from v1.train._trainer import PolicyTrainer, shard_with_fsdp2

SHAPE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def group(seed: int) -> list[Sample]:
    """Four completions of one 6-token prompt (the shared-prefix layout pays for them)."""
    rng = random.Random(seed)
    prompt = [rng.randrange(3, 200) for _ in range(6)]
    samples = []
    for length in (2, 3, 2, 4):
        ids = prompt + [rng.randrange(3, 200) for _ in range(length)]
        mask = [0] * len(prompt) + [1] * length
        samples.append(
            Sample(ids, mask, [rng.uniform(-6.0, -4.0) * m for m in mask], [rng.choice((-1.0, 1.0)) * m for m in mask])
        )
    return samples


def logprob_sum(model: Any, samples: list[Sample], shared: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss positions' log-probabilities of `samples` and their sum's backward (one way or the other)."""
    batch = collate(samples, 0)
    where = batch.loss_mask > 0
    if shared:
        layout = shared_prefix_batch(samples)
        assert layout is not None
        result = shared_prefix_logprobs(model, layout)
        assert result is not None, "the shared-prefix forward refused the model"
        logprobs = result[0]
    else:
        logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets, where=where)[0]
    total = (logprobs * where).sum()
    total.backward()
    return logprobs.detach() * where, total.detach()


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every gradient whole (a collective for a sharded model)."""
    grads = {}
    for name, parameter in model.named_parameters():
        grad = parameter.grad
        grads[name] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad.clone()
    return grads


def largest(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[name] - b[name]).abs().max()) for name in a)


def compare(tied: bool, rank: int, world: int) -> dict[str, Any]:
    whole, _ = build_tiny_model({**SHAPE, "tie_word_embeddings": tied})
    sharded = shard_with_fsdp2(copy.deepcopy(whole), bf16=False)
    head_inputs: list[int] = []
    sharded.get_output_embeddings().register_forward_hook(lambda _m, args, _o: head_inputs.append(args[0].dim()))
    samples = group(0) + group(1)
    mine = share_samples(samples, world)[rank]
    found: dict[str, Any] = {}
    for shared in (False, True):
        logprobs, total = logprob_sum(sharded, mine, shared)
        expected, expected_total = logprob_sum(copy.deepcopy(whole), mine, shared=False)
        reference = copy.deepcopy(whole)
        logprob_sum(reference, samples, shared=False)  # the whole batch's gradient: the ranks' shares summed
        found[f"logprobs_{'shared' if shared else 'chunked'}"] = float((logprobs - expected).abs().max())
        found[f"loss_{'shared' if shared else 'chunked'}"] = abs(float(total - expected_total))
        found[f"grad_{'shared' if shared else 'chunked'}"] = largest(full_grads(sharded), full_grads(reference))
        sharded.zero_grad(set_to_none=True)
    found["head_input_dims"] = sorted(set(head_inputs))
    found["step_weights"] = trainer_step(whole, samples, rank, world)
    return found


def new_trainer(model: torch.nn.Module) -> PolicyTrainer:
    """GRPO with shared prefixes, micro-batches of 4 (one group each)."""
    return PolicyTrainer(
        model, LossConfig(kind="grpo"), OptimConfig(lr=1e-2), max_steps=1, micro_batch_size=4, share_prefixes=True
    )


def trainer_step(whole: torch.nn.Module, samples: list[Sample], rank: int, world: int) -> dict[str, torch.Tensor]:
    """The weights after one sharded step (each rank its share) from `whole`'s, gathered (rank 0)."""
    trainer = new_trainer(shard_with_fsdp2(copy.deepcopy(whole), bf16=False))
    trainer.train_step(share_samples(samples, world)[rank])
    return trainer.full_state_dict()


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {"world": world, "untied": compare(False, rank, world), "tied": compare(True, rank, world)}
    if rank == 0:
        weights = {kind: results[kind].pop("step_weights") for kind in ("untied", "tied")}
        torch.save(weights, out / "step_weights.pt")
        (out / "head.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
