"""Benchmark the trainer on CPU (tokens/s per optimizer step) and the tiny recipe's wall time.

    python benchmarks/train.py                       # trainer tokens/s, then the whole tiny recipe
    python benchmarks/train.py --skip-recipe         # trainer tokens/s only (seconds)
    python benchmarks/train.py --skip-trainer --seeds 0 1 2 --runs 2 --jobs 2   # robustness: 6 runs, 2 at a time

Trainer: `PolicyTrainer.train_step` on synthetic samples (prompt 24 tokens, completion
`--completion` tokens, loss on the completion) for the recipe's tiny model and a larger
one; tokens/s counts every input token of the step (forward + backward + AdamW).
Recipe: `v1 train` (a subprocess, exactly the README's command) on a copy of the recipe
per seed (`seed`, `rollouts.seed` and the tiny model's `seed` set to it: model init, SFT
batches and data order), `--runs` times each, at most `--jobs` at a time: wall and CPU
time, peak RSS, load average, held-out reward before/after RL, and a last line per seed
saying whether every run gained at least `--min-gain`. Prints figures; asserts nothing on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from v1.inference import build_tiny_model  # noqa: E402
from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
    PolicyTrainer,
    Sample,
    TrainConfig,
)

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


def seeded_config(path: str, seed: int, output_dir: Path) -> Path:
    """A copy of the recipe at `path` with every seed set to `seed`, writing to `output_dir`; returns the TOML's path."""
    config = TrainConfig.load(path)
    config = config.model_copy(
        update={
            "output_dir": str(output_dir),
            "seed": seed,
            "rollouts": config.rollouts.model_copy(update={"seed": seed}),
            "model": config.model.model_copy(update={"tiny": {**(config.model.tiny or {}), "seed": seed}}),
        }
    )
    toml = output_dir.with_suffix(".toml")
    toml.write_text(config.to_toml())
    assert TrainConfig.load(toml) == config, "the per-seed TOML must load back as the same config"
    return toml


def run_recipe(path: str, seed: int, run: int, folder: Path) -> dict[str, Any]:
    """One `v1 train` of the recipe with `seed` (in a subprocess): its figures from `summary.json` and `metrics.jsonl`."""
    output_dir = folder / f"seed{seed}_run{run}"
    toml = seeded_config(path, seed, output_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(folder / f"seed{seed}_run{run}.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "v1.cli", "train", str(toml), "--no-progress"], stdout=log, stderr=log, env=env
        )
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(
            f"seed {seed} run {run}: v1 train exited {process.returncode} (log: {folder / f'seed{seed}_run{run}.log'})"
        )
    summary = json.loads((output_dir / "summary.json").read_text())
    lines = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    before, after = summary["eval_before"], summary["eval_after"]
    return {
        "seed": seed,
        "run": run,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "load": (load_before, os.getloadavg()[0]),
        "rl_steps_s": sum(line["step_time_s"] for line in lines),
        "train_s": sum(line["train_time_s"] for line in lines),
        "groups_finished": sum(line["groups_finished"] for line in lines),
        "filtered": sum(line["filtered_zero_variance"] for line in lines),
        "sft_steps": summary.get("sft_steps"),
        "eval_before": before,
        "eval_after": after,
        "gain": after - before,
        "steps": summary.get("steps"),
    }


def print_run(run: dict[str, Any]) -> None:
    print(
        f"recipe seed {run['seed']} run {run['run']}: held-out reward {run['eval_before']:.3f} -> {run['eval_after']:.3f} "
        f"({run['gain']:+.3f}); {run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU, peak RSS {run['peak_rss_mb']:.0f} MiB, "
        f"load {run['load'][0]:.1f} -> {run['load'][1]:.1f}; SFT {run['sft_steps']} steps; RL steps {run['rl_steps_s']:.0f} s "
        f"(trainer {run['train_s']:.0f} s); {run['groups_finished']} groups, {run['filtered']} filtered",
        flush=True,
    )


def recipe_runs(path: str, seeds: list[int], runs: int, jobs: int, folder: Path) -> list[dict[str, Any]]:
    """`runs` runs of every seed, `jobs` at a time, each printed as it finishes."""

    def one(seed_run: tuple[int, int]) -> dict[str, Any]:
        result = run_recipe(path, *seed_run, folder)
        print_run(result)
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, [(seed, run) for run in range(1, runs + 1) for seed in seeds]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=128, help="samples per optimizer step")
    parser.add_argument("--micro", type=int, default=64, help="micro-batch size")
    parser.add_argument("--completion", type=int, default=8, help="completion tokens per sample")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    parser.add_argument("--recipe", default=str(ROOT / "configs" / "train" / "tiny_first_letter.toml"))
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each seed")
    parser.add_argument("--jobs", type=int, default=1, help="recipe runs at a time")
    parser.add_argument("--min-gain", type=float, default=0.3, help="the held-out gain every run of a seed must reach")
    parser.add_argument("--keep", default=None, help="keep the runs' outputs in this folder (default: a temporary one)")
    parser.add_argument("--skip-recipe", action="store_true")
    parser.add_argument("--skip-trainer", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.runs < 1 or args.jobs < 1:
        parser.error("--runs and --jobs must be at least 1")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    figures: dict[str, Any] = {"trainer": {}, "recipe": []}
    for name, size in {} if args.skip_trainer else SIZES.items():
        figure = trainer_tokens_per_s(size, args.samples, args.micro, args.completion, args.steps)
        figures["trainer"][name] = figure
        print(
            f"trainer {name}: {figure['params'] / 1e6:.2f}M params, {figure['tokens_per_step']:.0f} tokens/step, "
            f"{figure['tokens_per_s']:.0f} tokens/s"
        )
    if not args.skip_recipe:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(args.keep or scratch)
            folder.mkdir(parents=True, exist_ok=True)
            figures["recipe"] = recipe_runs(args.recipe, args.seeds, args.runs, args.jobs, folder)
        for seed in args.seeds:
            gains = [run["gain"] for run in figures["recipe"] if run["seed"] == seed]
            verdict = "passes" if min(gains) >= args.min_gain else "FAILS"
            print(
                f"seed {seed}: gains {', '.join(f'{gain:+.3f}' for gain in gains)}: {verdict} (every run >= {args.min_gain:+.2f})"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
