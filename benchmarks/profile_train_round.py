"""Where a training round's time goes: rounds of 16 groups x 8 first_letter rollouts through the recorded path.

    python benchmarks/profile_train_round.py                 # 5 timed rounds, then the engine's counters
    python benchmarks/profile_train_round.py --profile       # the same under cProfile, by part of the stack

A round is what the trainer asks of the orchestrator per step: `Env.run_group` for 16 examples of
the tiny recipe's taskset, 8 rollouts each, at the recipe's sampling args plus token ids and
logprobs, through the harness and the interception endpoint (every call recorded) to the built-in
inference server in this process (its batch the run's `max_concurrent`, as a training run
sets it), the trainer idle, the heap frozen as a training run freezes it. The model is the
recipe's tiny one, untrained (it answers 4 tokens). Prints wall and CPU seconds per round (CPU
of both threads: close to the wall time means the two mostly take turns) and the engine's
counters (requests, distinct prompts prefilled, prefill passes, decode steps); with
`--profile` the cProfile time by part of the stack (profiling slows everything about 2x: read
the shares).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from v1._gc_tuning import frozen_heap  # noqa: E402
from v1.inference.server import InferenceServer  # noqa: E402
from v1.loading import load_environment  # noqa: E402
from v1.train.config import TrainConfig  # noqa: E402
from v1.train.model import load_policy  # noqa: E402
from v1.train.run import TOKEN_SAMPLING_ARGS, builtin_batch_size  # noqa: E402

RECIPE = ROOT / "configs" / "train" / "tiny_first_letter.toml"
PARTS = (
    ("v1/interception/", "v1 endpoint"),
    ("v1/clients/", "v1 upstream clients"),
    ("v1/inference/", "built-in server (loop side)"),
    ("v1/", "v1 harness, env, scoring"),
    ("aiohttp/", "aiohttp"),
    ("asyncio/", "asyncio"),
    ("json/", "json"),
    ("select", "waiting (epoll)"),
)


def part_of(filename: str, name: str) -> str:
    for fragment, part in PARTS:
        if fragment in filename or fragment in name:
            return part
    return "other (stdlib, C calls)"


def positive_int(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"between 1 and 10000, got {value}")
    return value


async def run(rounds: int, profile: cProfile.Profile | None) -> tuple[list[float], list[float], dict[str, Any]]:
    config = TrainConfig.load(RECIPE)
    model, tokenizer, _ = load_policy(config.model)
    env = load_environment(config.env.id, taskset=config.env.taskset, harness=config.env.harness)
    rows = list(env.get_dataset())
    sampling = {**config.rollouts.sampling_args, **TOKEN_SAMPLING_ARGS}
    per_step, per_group = config.rollouts.examples_per_step, config.rollouts.rollouts_per_example
    server = InferenceServer(model, tokenizer, model_name=config.inference.model_name, max_batch_size=builtin_batch_size(config))
    async with server:
        client = config.inference.client_config(server.url)

        async def one_round(index: int) -> None:
            chosen = [rows[(index * per_step + g) % len(rows)] for g in range(per_step)]
            groups = await asyncio.gather(
                *(env.run_group([row] * per_group, client, config.inference.model_name, dict(sampling)) for row in chosen)
            )
            errors = [state["error"] for group in groups for state in group if state.get("error")]
            if errors:
                raise SystemExit(f"profile_train_round: a rollout failed: {errors[0]}")

        await one_round(rounds)  # warm the pools, the endpoint and the engine
        times, cpu = [], []
        with frozen_heap():  # as the trainer runs its steps
            for index in range(rounds):
                started, started_cpu = time.perf_counter(), time.process_time()
                if profile is not None:
                    profile.enable()
                await one_round(index)
                if profile is not None:
                    profile.disable()
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
        return times, cpu, server.stats


def print_parts(profile: cProfile.Profile) -> None:
    stats = pstats.Stats(profile)
    by_part: dict[str, float] = defaultdict(float)
    for (filename, _line, name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        by_part[part_of(filename, name)] += own
    total = sum(by_part.values()) or 1.0
    for part, seconds in sorted(by_part.items(), key=lambda item: -item[1]):
        print(f"  {part:30} {seconds:7.3f} s  {100 * seconds / total:4.0f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--profile", action="store_true", help="run the rounds under cProfile and print time by part")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    times, cpu, stats = asyncio.run(run(args.rounds, profile))
    print(
        f"round of 16 x 8 rollouts: median {statistics.median(times):.3f} s wall, {statistics.median(cpu):.3f} s CPU "
        f"(both threads); wall {', '.join(f'{t:.3f}' for t in times)}"
    )
    print(
        f"engine: {stats['requests']} requests, {stats['prefills']} distinct prompts prefilled in {stats['prefill_passes']} passes, "
        f"{stats['decode_steps']} decode steps, largest batch {stats['max_batch_size']}"
    )
    if profile is not None:
        print("time on the event loop's thread by part (the engine's thread is not profiled):")
        print_parts(profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
