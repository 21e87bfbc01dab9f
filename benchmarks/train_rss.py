"""RSS over a long training run: is memory growth a leak? (issue 25, item 7)

    python benchmarks/train_rss.py [--steps 1000] [--every 100]

Runs `v1.train.train` on a smaller copy of the tiny recipe (no SFT warm-up, no evals,
2 examples x 4 rollouts per step, 2 tokens per rollout, zero-variance groups kept so every
step trains) for `--steps` steps through the built-in inference server and the endpoint, and
prints the process's RSS every `--every` steps (from each step's `rss_mb`), then the growth
over the first and the second half. Growth that stops (a plateau: allocator pools, caches
warming up) is not a leak; growth that keeps its slope to the end is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from v1.train import TrainConfig, train

RECIPE = Path(__file__).resolve().parent.parent / "configs" / "train" / "tiny_first_letter.toml"


def small_config(folder: str, steps: int) -> TrainConfig:
    config = TrainConfig.load(RECIPE)
    return config.model_copy(
        update={
            "output_dir": folder,
            "max_steps": steps,
            "rollouts": config.rollouts.model_copy(
                update={
                    "examples_per_step": 2,
                    "rollouts_per_example": 4,
                    "max_groups_per_step": None,
                    "filter_zero_variance": False,
                    "sampling_args": {"temperature": 1.0, "max_tokens": 2},
                }
            ),
            "optim": config.optim.model_copy(update={"updates_per_step": 1}),
            "eval": config.eval.model_copy(update={"at_start": False, "at_end": False}),
            "sft": config.sft.model_copy(update={"warmup": False}),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    if args.steps < 2 or args.every < 1:
        parser.error("--steps must be >= 2 and --every >= 1")
    points: list[dict[str, Any]] = []
    started = time.perf_counter()

    def on_step(metrics: dict[str, Any]) -> None:
        if metrics["step"] == 1 or metrics["step"] % args.every == 0:
            point = {"step": metrics["step"], "rss_mb": round(metrics["rss_mb"], 1),
                     "elapsed_s": round(time.perf_counter() - started, 1)}  # fmt: skip
            points.append(point)
            print(json.dumps(point), flush=True)

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(train(small_config(folder, args.steps), on_step=on_step))
    middle = points[len(points) // 2]
    print(
        f"RSS {points[0]['rss_mb']} MiB at step 1, {middle['rss_mb']} at step {middle['step']}, "
        f"{points[-1]['rss_mb']} at step {points[-1]['step']}: first half +{middle['rss_mb'] - points[0]['rss_mb']:.1f} MiB, "
        f"second half +{points[-1]['rss_mb'] - middle['rss_mb']:.1f} MiB"
    )


if __name__ == "__main__":
    main()
