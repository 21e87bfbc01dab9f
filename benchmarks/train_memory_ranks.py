"""Per-rank peak memory of a training step at 1, 2 and 4 CPU ranks (FSDP2 over gloo), for a model whose weights dominate.

    python benchmarks/train_memory_ranks.py                 # 1, 2 and 4 ranks
    python benchmarks/train_memory_ranks.py --ranks 1 2     # a subset

One rank is one process without FSDP (as ``v1 train`` runs); N > 1 is ``torchrun --nproc-per-node N``
loading the model as a run does (`load_sharded_policy`: every rank builds it on the meta device
and allocates only its FSDP2 shards; rank 0 alone builds the whole model and sends each rank its
shards, then frees it). The model is a Qwen2-layout model from a config (no download; default
~106M parameters, 404 MiB in fp32); each rank takes `--steps` GRPO steps with AdamW on its share of
a small batch (so weights, gradients and Adam's two moments dominate, not activations), and
reports its peak RSS (``VmHWM``) and RSS once the model is loaded, then after the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
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

    from v1.train.batch import Sample
    from v1.train.config import ModelConfig, OptimConfig
    from v1.train.losses import LossConfig
    from v1.train.model import load_policy, load_sharded_policy
    from v1.train.ranks import share_samples
    from v1.train.trainer import PolicyTrainer

    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model_config = ModelConfig(path=args.folder, device="cpu")  # loaded as `v1 train` loads [model] path
    model: torch.nn.Module
    if distributed:
        model = load_sharded_policy(model_config, None, bf16=False, keep_whole=False)[0]
    else:
        model = load_policy(model_config)[0]
    parameters = sum(p.numel() for p in model.parameters())  # a DTensor counts its whole shape
    loaded = {"peak_load_mb": rss_mb("VmHWM"), "rss_loaded_mb": rss_mb("VmRSS")}
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-5), max_steps=args.steps, micro_batch_size=4)
    rng = random.Random(0)
    samples = [
        Sample([rng.randrange(args.vocab) for _ in range(32)], [0] * 16 + [1] * 16, [0.0] * 16 + [-2.0] * 16,
               [0.0] * 16 + [rng.choice((-1.0, 1.0))] * 16)
        for _ in range(8)
    ]  # fmt: skip
    for _ in range(args.steps):
        trainer.train_step(share_samples(samples, world)[rank])
    mine = {"rank": rank, **loaded, "peak_rss_mb": rss_mb("VmHWM"), "rss_after_mb": rss_mb("VmRSS")}
    every = [mine]
    if distributed:
        every = [{} for _ in range(world)]
        dist.all_gather_object(every, mine)
        dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps({"world": world, "parameters": parameters, "ranks": every}), flush=True)


def write_model(args: argparse.Namespace, folder: Path) -> None:
    """The benchmark's model and tokenizer as a ``save_pretrained`` folder (written once, before any rank starts)."""
    sys.path.insert(0, str(ROOT))
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from v1.inference import build_tiny_tokenizer

    config = Qwen2Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3, num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 128, tie_word_embeddings=False,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)


def measure(ranks: int, args: argparse.Namespace) -> dict[str, object]:
    script = [
        str(Path(__file__).resolve()),
        "--worker",
        f"--folder={args.folder}",
        f"--vocab={args.vocab}",
        f"--steps={args.steps}",
    ]
    if ranks == 1:
        command = [sys.executable, *script]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{ranks} ranks failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="v1-memory-") as folder:
        args.folder = folder
        write_model(args, Path(folder))
        report(args)


def report(args: argparse.Namespace) -> None:
    """Measure each rank count and print a row per rank."""
    print(f"{'ranks':>5} {'rank':>4} {'load peak MiB':>13} {'loaded MiB':>10} {'peak RSS MiB':>12} {'RSS after MiB':>13}")
    for ranks in args.ranks:
        result = measure(ranks, args)
        for one in result["ranks"]:  # type: ignore[attr-defined]
            print(
                f"{ranks:>5} {one['rank']:>4} {one['peak_load_mb']:>13.0f} {one['rss_loaded_mb']:>10.0f} "
                f"{one['peak_rss_mb']:>12.0f} {one['rss_after_mb']:>13.0f}",
                flush=True,
            )
    print(f"model: {result['parameters'] / 1e6:.0f}M parameters, {4 * result['parameters'] / 2**20:.0f} MiB in fp32")  # type: ignore[operator]


if __name__ == "__main__":
    main()
