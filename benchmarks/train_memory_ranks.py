"""Per-rank peak memory of a training step at 1, 2 and 4 CPU ranks (FSDP2 over gloo), for a model whose weights dominate.

    python benchmarks/train_memory_ranks.py                 # 1, 2 and 4 ranks
    python benchmarks/train_memory_ranks.py --ranks 1 2     # a subset

One rank is one process without FSDP (as ``v1 train`` runs); N > 1 is ``torchrun --nproc-per-node N``
with the model sharded by `shard_with_fsdp2`. Each rank builds the same Qwen2-layout model from a
config (no download; default ~110M parameters, 440 MB in fp32), takes `--steps` GRPO steps with AdamW
on its share of a small batch (so weights, gradients and Adam's two moments dominate, not
activations), and reports its peak RSS (``VmHWM``) and its RSS after the steps. Every rank still
builds the whole model before `fully_shard` (no meta-device load yet), so the peak includes that
full copy; the steady state after the steps is what sharding saves.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker(args: argparse.Namespace) -> None:
    """One rank: build, shard when distributed, train, report (rank 0 prints every rank's figures as JSON)."""
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from v1.train.batch import Sample
    from v1.train.config import OptimConfig
    from v1.train.losses import LossConfig
    from v1.train.ranks import share_samples
    from v1.train.trainer import PolicyTrainer, shard_with_fsdp2

    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3, num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 128, tie_word_embeddings=False,
    )  # fmt: skip
    model: torch.nn.Module = Qwen2ForCausalLM(config)
    parameters = sum(p.numel() for p in model.parameters())
    if distributed:
        model = shard_with_fsdp2(model, bf16=False)
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-5), max_steps=args.steps, micro_batch_size=4)
    rng = random.Random(0)
    samples = [
        Sample([rng.randrange(args.vocab) for _ in range(32)], [0] * 16 + [1] * 16, [0.0] * 16 + [-2.0] * 16,
               [0.0] * 16 + [rng.choice((-1.0, 1.0))] * 16)
        for _ in range(8)
    ]  # fmt: skip
    for _ in range(args.steps):
        trainer.train_step(share_samples(samples, world)[rank])
    mine = {"rank": rank, "peak_rss_mb": rss_mb("VmHWM"), "rss_after_mb": rss_mb("VmRSS")}
    every = [mine]
    if distributed:
        every = [{} for _ in range(world)]
        dist.all_gather_object(every, mine)
        dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps({"world": world, "parameters": parameters, "ranks": every}), flush=True)


def measure(ranks: int, args: argparse.Namespace) -> dict[str, object]:
    script = [str(Path(__file__).resolve()), "--worker", *(f"--{k}={v}" for k, v in sizes(args).items())]
    if ranks == 1:
        command = [sys.executable, *script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{ranks} ranks failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))


def sizes(args: argparse.Namespace) -> dict[str, int]:
    return {"hidden": args.hidden, "layers": args.layers, "vocab": args.vocab, "steps": args.steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"{'ranks':>5} {'rank':>4} {'peak RSS MiB':>12} {'RSS after MiB':>13}")
    for ranks in args.ranks:
        result = measure(ranks, args)
        for one in result["ranks"]:  # type: ignore[attr-defined]
            print(f"{ranks:>5} {one['rank']:>4} {one['peak_rss_mb']:>12.0f} {one['rss_after_mb']:>13.0f}", flush=True)
    print(f"model: {result['parameters'] / 1e6:.0f}M parameters, {4 * result['parameters'] / 2**20:.0f} MiB in fp32")  # type: ignore[operator]


if __name__ == "__main__":
    main()
