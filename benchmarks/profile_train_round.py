"""Where a training round's time goes: rounds of 16 groups x 8 first_letter rollouts through the recorded path.

    python benchmarks/profile_train_round.py                 # 5 timed rounds, then the engine's counters
    python benchmarks/profile_train_round.py --profile       # the same under cProfile, by part of the stack
    python benchmarks/profile_train_round.py --train-steps 10                       # a training step's phases, tiny
    python benchmarks/profile_train_round.py --train-steps 3 --shape qwen2.5-0.5b   # the same at Qwen2.5-0.5B's shape

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

`--train-steps N`: a whole v1 training run instead (`v1.train.train`, on-policy, at
`train_vs_trl.py`'s equal work for `--shape`), its step split into phases by timing the
functions that do each: generation (waiting for the step's rollouts, less scoring), scoring
(the harness's `score_group`, summed over groups), forward/backward (the trainer's updates less
the optimizer), optimizer (gradient clipping, AdamW, zeroing gradients), weights out (the
trainer's `full_state_dict`: what the sync sends), weight copy (into the built-in engine),
other (batch building, metrics, checkpoints). Prints each phase's median per step over the steps
after the first (a warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import inspect
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from train_vs_trl import SHAPES, make_checkpoint, recipe_config  # noqa: E402

from v1._util.gc_tuning import frozen_heap  # noqa: E402
from v1.env import load_environment  # noqa: E402
from v1.inference import InferenceServer  # noqa: E402
from v1.train import (  # noqa: E402
    TrainConfig,
    load_policy,
)
from v1.train._run import TOKEN_SAMPLING_ARGS, builtin_batch_size  # noqa: E402

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


PHASES = ("generation", "scoring", "forward/backward", "optimizer", "weights out", "weight copy", "other")


class PhaseClock:
    """Seconds spent in each phase, cut into steps where each step hands the orchestrator its new version."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self.step_started = time.perf_counter()

    def add(self, phase: str, seconds: float) -> None:
        self.current[phase] += seconds

    def end_step(self) -> None:
        now = time.perf_counter()
        step = dict(self.current)
        step["total"] = now - self.step_started
        self.steps.append(step)
        self.current = defaultdict(float)
        self.step_started = now


@contextmanager
def timed(owner: Any, name: str, record: Any) -> Iterator[None]:
    """`owner.name` (sync or async) calls `record(seconds)` after each call, until the block ends."""
    original = getattr(owner, name)

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                record(time.perf_counter() - started)
    else:

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                record(time.perf_counter() - started)

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


def profile_training(shape_name: str, steps: int, trainer_threads: int | None) -> list[dict[str, float]]:
    """Each step's seconds by phase in one on-policy v1 run at `train_vs_trl.py`'s equal work for the shape.

    `trainer_threads`: the trainer's torch threads instead of the run's own choice (`trainer_cpu_threads`).
    """
    from v1.harness import Harness
    from v1.inference import InferenceServer
    from v1.train import Orchestrator, train
    from v1.train import _run as run_module
    from v1.train import _trainer as trainer_module

    shape = SHAPES[shape_name]
    out = Path(tempfile.mkdtemp(prefix="v1-phases-"))
    checkpoint = make_checkpoint(out, shape)
    config = recipe_config(out / "run", 0, steps, checkpoint, shape=shape)
    config = config.model_copy(update={"eval": config.eval.model_copy(update={"at_end": False})})
    clock = PhaseClock()
    optimizer_s = [0.0]

    def optimizer_part(seconds: float) -> None:
        optimizer_s[0] += seconds
        clock.add("optimizer", seconds)

    def update_part(seconds: float) -> None:  # an update's time less its optimizer part
        clock.add("forward/backward", seconds - optimizer_s[0])
        optimizer_s[0] = 0.0

    PolicyTrainer = trainer_module.PolicyTrainer
    with (
        timed(Orchestrator, "next_batch", lambda s: clock.add("rollouts", s)),
        timed(Harness, "score_group", lambda s: clock.add("scoring", s)),
        timed(PolicyTrainer, "_update", update_part),
        timed(torch.nn.utils, "clip_grad_norm_", optimizer_part),
        timed(torch.optim.AdamW, "step", optimizer_part),
        timed(torch.optim.AdamW, "zero_grad", optimizer_part),
        timed(PolicyTrainer, "full_state_dict", lambda s: clock.add("weights out", s)),
        timed(InferenceServer, "load_weights", lambda s: clock.add("weight copy", s)),
        timed(Orchestrator, "set_version", lambda s: clock.end_step()),
    ):
        if trainer_threads is not None:
            run_module.rank_cpu_threads = lambda *args: trainer_threads  # type: ignore[assignment]
        asyncio.run(train(config))
    for step in clock.steps:
        step["generation"] = step.pop("rollouts", 0.0) - step.get("scoring", 0.0)
        step["other"] = step["total"] - sum(step.get(phase, 0.0) for phase in PHASES if phase != "other")
    return clock.steps


def print_phases(shape_name: str, steps: list[dict[str, float]]) -> None:
    timed_steps = steps[1:] or steps  # the first step warms the pools, the engine and the allocator
    total = statistics.median(step["total"] for step in timed_steps)
    print(f"{shape_name}: median step {total:.3f} s over steps 2-{len(steps)} (phase medians; scoring summed over groups)")
    for phase in PHASES:
        seconds = statistics.median(step.get(phase, 0.0) for step in timed_steps)
        print(f"  {phase:18} {1000 * seconds:9.1f} ms  {100 * seconds / total:4.0f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--profile", action="store_true", help="run the rounds under cProfile and print time by part")
    parser.add_argument("--train-steps", type=positive_int, help="profile a training run of this many steps by phase")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="tiny", help="with --train-steps: the model and work per step")
    parser.add_argument(
        "--trainer-threads", type=positive_int, help="with --train-steps: the trainer's torch threads (default: the run's choice)"
    )
    args = parser.parse_args()
    if args.train_steps:
        print_phases(args.shape, profile_training(args.shape, args.train_steps, args.trainer_threads))
        return 0
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
