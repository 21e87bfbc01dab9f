"""Benchmark the trainer on CPU (tokens/s per optimizer step) and the tiny recipe's wall time.

    python benchmarks/train.py                       # trainer tokens/s, then the whole tiny recipe
    python benchmarks/train.py --skip-recipe         # trainer tokens/s only (seconds)
    python benchmarks/train.py --recipe configs/train/tiny_first_letter.toml --seeds 0 1 2

Trainer: `PolicyTrainer.train_step` on synthetic samples (prompt 24 tokens, completion
`--completion` tokens, loss on the completion) for the recipe's tiny model and a larger
one; tokens/s counts every input token of the step (forward + backward + AdamW).
Recipe: `v1.train.run.train` on the recipe (SFT warm-up, held-out eval before, RL,
eval after) per seed: wall time, held-out reward before/after RL, RSS at the first
and last step. Prints figures; asserts nothing on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from v1.inference import build_tiny_model  # noqa: E402
from v1.train.batch import Sample  # noqa: E402
from v1.train.config import OptimConfig, TrainConfig  # noqa: E402
from v1.train.losses import LossConfig  # noqa: E402
from v1.train.run import train  # noqa: E402
from v1.train.trainer import PolicyTrainer  # noqa: E402

SIZES = {
    "tiny (recipe)": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "small": {
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
    },
}


def synthetic_samples(count: int, prompt: int, completion: int, vocab: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        ids = [rng.randrange(vocab) for _ in range(prompt + completion)]
        mask = [0] * prompt + [1] * completion
        samples.append(Sample(ids, mask, [-1.0 * m for m in mask], [rng.choice((-0.5, 0.5)) * m for m in mask]))
    return samples


def trainer_tokens_per_s(size: dict[str, int], samples: int, micro: int, completion: int, steps: int) -> dict[str, float]:
    model, tokenizer = build_tiny_model(size)
    params = sum(p.numel() for p in model.parameters())
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-4), max_steps=steps + 1, micro_batch_size=micro)
    batch = synthetic_samples(samples, 24, completion, len(tokenizer), 0)
    trainer.train_step(batch)  # warm-up
    rates = [trainer.train_step(batch)["trainer_tokens_per_s"] for _ in range(steps)]
    return {"params": params, "tokens_per_step": samples * (24 + completion), "tokens_per_s": statistics.median(rates)}


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_recipe(path: str, seed: int) -> dict[str, float | None]:
    config = TrainConfig.load(path)
    with tempfile.TemporaryDirectory() as folder:
        config = config.model_copy(
            update={
                "output_dir": folder,
                "seed": seed,
                "rollouts": config.rollouts.model_copy(update={"seed": seed}),
                "model": config.model.model_copy(update={"tiny": {**(config.model.tiny or {}), "seed": seed}}),
            }
        )
        started, cpu_started = time.perf_counter(), cpu_seconds()
        result = asyncio.run(train(config))
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
        lines = [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines()]
    return {
        "seed": seed,
        "wall_s": wall,
        "cpu_s": cpu,
        "rl_steps_s": sum(line["step_time_s"] for line in lines),
        "train_s": sum(line["train_time_s"] for line in lines),
        "groups_finished": sum(line["groups_finished"] for line in lines),
        "filtered": sum(line["filtered_zero_variance"] for line in lines),
        "eval_before": result.eval_before,
        "eval_after": result.eval_after,
        "gain": (result.eval_after or 0.0) - (result.eval_before or 0.0),
        "rss_mb_step_1": lines[0]["rss_mb"],
        "rss_mb_last_step": lines[-1]["rss_mb"],
        "steps": result.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=128, help="samples per optimizer step")
    parser.add_argument("--micro", type=int, default=64, help="micro-batch size")
    parser.add_argument("--completion", type=int, default=8, help="completion tokens per sample")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    parser.add_argument("--recipe", default=str(ROOT / "configs" / "train" / "tiny_first_letter.toml"))
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--skip-recipe", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    figures: dict[str, object] = {"trainer": {}, "recipe": []}
    for name, size in SIZES.items():
        figure = trainer_tokens_per_s(size, args.samples, args.micro, args.completion, args.steps)
        figures["trainer"][name] = figure  # type: ignore[index]
        print(
            f"trainer {name}: {figure['params'] / 1e6:.2f}M params, {figure['tokens_per_step']:.0f} tokens/step, "
            f"{figure['tokens_per_s']:.0f} tokens/s"
        )
    if not args.skip_recipe:
        for seed in args.seeds:
            run = run_recipe(args.recipe, seed)
            figures["recipe"].append(run)  # type: ignore[attr-defined]
            print(
                f"recipe seed {seed}: {run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU; RL steps {run['rl_steps_s']:.0f} s "
                f"(trainer {run['train_s']:.0f} s, the rest generation), the rest SFT + evals; "
                f"{run['groups_finished']} groups, {run['filtered']} filtered; held-out reward {run['eval_before']:.3f} -> {run['eval_after']:.3f} "
                f"(+{run['gain']:.3f}), RSS step 1 {run['rss_mb_step_1']:.0f} MiB, last step {run['rss_mb_last_step']:.0f} MiB"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
