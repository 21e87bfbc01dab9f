"""v1's trainer against TRL's GRPOTrainer at equal work: s/step, rollout tokens/s, held-out reward.

    python benchmarks/train_vs_trl.py                       # both, seeds 0 1 2, 40 steps each
    python benchmarks/train_vs_trl.py --seeds 0 --steps 80 --frameworks v1
    python benchmarks/train_vs_trl.py --lr 3e-3 --warmup-steps 0     # the earlier setting: 3e-3 from the first step

Equal work: the recipe's tiny model (`configs/train/tiny_first_letter.toml`) after ONE SFT
warm-up, saved once and loaded by both; the first_letter task (same prompts, same reward
function, same 400 training strings); per step 16 prompts x 8 generations, at most 4 tokens
at temperature 1, 2 optimizer updates on them in micro-batches of 64 (v1: `updates_per_step = 2`;
TRL: `num_iterations = 2`, `gradient_accumulation_steps = 2`); the GRPO loss (per-sequence
mean, clip 0.2), advantages reward minus the group mean without std scaling (v1's default;
TRL `scale_rewards = "none"`), no KL (`beta = 0`), AdamW at the recipe's learning rate (2e-3,
reached linearly over its first 10 steps; TRL gets the same schedule as a `LambdaLR` over its
optimizer updates, two per step), gradient norm clipped at 1.0; the same seed for each pair. v1 keeps every group (`filter_zero_variance =
false`: TRL trains on every group too) and is on-policy like TRL (`max_staleness = 0`;
`--max-staleness 1` is the recipe's overlap, generating one step ahead); every rollout goes
through the harness and the interception endpoint (recorded) to the built-in server. TRL generates each round in process with
`model.generate` (no server, no endpoint) and trains on the same process's two cores.

Both are scored by the same code: v1's `Env.evaluate` on the 112 held-out strings, greedy, 4
tokens, against the built-in server serving the trained weights. Each (framework, seed) runs in
a fresh process. Prints per run and the medians over seeds; asserts nothing on timing. Needs TRL
(`pip install -e ".[bench]"`): without it, one line and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "configs" / "train" / "tiny_first_letter.toml"
sys.path.insert(0, str(ROOT))

PROMPTS_PER_STEP = 16
GENERATIONS = 8
MICRO_BATCH = 64
UPDATES_PER_STEP = 2
MAX_TOKENS = 4
RESULT_PREFIX = "RESULT "


def step_count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"between 1 and 100000, got {value}")
    return value


def seed_int(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"a seed is in [0, 2**31), got {value}")
    return value


def thread_count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"between 0 (torch's default) and 1024, got {value}")
    return value


def learning_rate(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a learning rate in (0, 1], got {text}")
    return value


def warmup_count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"between 0 and 100000, got {value}")
    return value


def staleness(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 16:
        raise argparse.ArgumentTypeError(f"between 0 and 16, got {value}")
    return value


def recipe_config(
    output_dir: Path,
    seed: int,
    steps: int,
    checkpoint: Path | None,
    max_staleness: int = 0,
    lr: float | None = None,
    warmup_steps: int | None = None,
) -> Any:
    """The recipe at equal work: the SFT checkpoint as the model (or the tiny config, to make it), every group kept.

    `lr` and `warmup_steps` default to the recipe's.
    """
    from v1.train.config import TrainConfig

    config = TrainConfig.load(RECIPE)
    lr = config.optim.lr if lr is None else lr
    warmup_steps = config.optim.warmup_steps if warmup_steps is None else warmup_steps
    update: dict[str, Any] = {"output_dir": str(output_dir), "max_steps": steps, "seed": seed, "micro_batch_size": MICRO_BATCH}
    if checkpoint is not None:
        update["model"] = config.model.model_copy(update={"path": str(checkpoint), "tiny": None})
        update["sft"] = config.sft.model_copy(update={"warmup": False})
    rollouts = {
        "examples_per_step": PROMPTS_PER_STEP,
        "rollouts_per_example": GENERATIONS,
        "filter_zero_variance": False,
        "max_groups_per_step": None,
        "sampling_args": {"temperature": 1.0, "max_tokens": MAX_TOKENS},
        "seed": seed,
        "max_staleness": max_staleness,
    }
    update["rollouts"] = config.rollouts.model_copy(update=rollouts)
    update["loss"] = config.loss.model_copy(update={"kind": "grpo", "kl_coef": 0.0, "scale_rewards": "none", "clip_low": 0.2})
    update["optim"] = config.optim.model_copy(
        update={
            "lr": lr,
            "updates_per_step": UPDATES_PER_STEP,
            "max_grad_norm": 1.0,
            "schedule": "constant",
            "warmup_steps": warmup_steps,
            "weight_decay": 0.0,
        }
    )
    update["eval"] = config.eval.model_copy(update={"at_start": False, "at_end": True, "every": 0})
    return config.model_copy(update=update)


def make_checkpoint(out: Path) -> Path:
    """The recipe's SFT warm-up, once: ``out/sft/model`` (model and tokenizer)."""
    from v1.train.run import run_sft

    config = recipe_config(out, 0, 1, None)
    run_sft(config)
    return out / "sft" / "model"


async def held_out_reward(model: Any, tokenizer: Any, config: Any) -> float:
    """v1's held-out eval (the recipe's `[eval]`: every held-out string, greedy) of `model` on the built-in server."""
    from v1.inference.server import InferenceServer
    from v1.loading import load_environment
    from v1.train.run import evaluate

    env = load_environment(config.env.id, taskset=config.env.taskset, harness=config.env.harness)
    async with InferenceServer(model, tokenizer, model_name=config.inference.model_name) as server:
        return await evaluate(env, config, config.inference.client_config(server.url))


def run_v1(out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    from v1.train.run import train

    config = recipe_config(
        out / f"v1_seed{seed}", seed, steps, checkpoint, options.max_staleness, options.lr, options.warmup_steps
    )
    started = time.perf_counter()
    result = asyncio.run(train(config))
    wall = time.perf_counter() - started
    return {
        "step_s": [m["step_time_s"] for m in result.metrics],
        "rollout_tokens_per_s": [m["rollout_tokens_per_s"] for m in result.metrics],
        "rollouts": sum(m["groups_finished"] for m in result.metrics) * GENERATIONS,
        "eval_after": result.eval_after,
        "wall_s": wall,
    }


def run_trl(out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tasksets.first_letter import first_letter, train_rows
    from v1.train.trainer import lr_factor

    if options.trl_threads:
        torch.set_num_threads(options.trl_threads)
    config = recipe_config(out, seed, steps, checkpoint, 0, options.lr, options.warmup_steps)
    tokens_per_round: list[int] = []
    ends: list[float] = []

    def reward(completions: list[Any], answer: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
        tokens_per_round.append(sum(len(ids) for ids in completion_ids))
        return [first_letter(completion, expected) for completion, expected in zip(completions, answer)]

    class StepTimes(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    rows = [{"prompt": [{"role": "user", "content": row["question"]}], "answer": row["answer"]} for row in train_rows()]
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    args = GRPOConfig(
        output_dir=str(out / f"trl_seed{seed}"),
        seed=seed,
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=PROMPTS_PER_STEP * GENERATIONS // MICRO_BATCH,
        num_generations=GENERATIONS,
        num_iterations=UPDATES_PER_STEP,
        max_steps=steps * UPDATES_PER_STEP,
        max_completion_length=MAX_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=config.optim.lr,
        lr_scheduler_type="constant",  # replaced by v1's schedule below
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="none",
        epsilon=0.2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, betas=config.optim.betas, weight_decay=0.0)
    # v1's schedule counts steps of UPDATES_PER_STEP updates; TRL's scheduler steps once per update
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda update: lr_factor(update // UPDATES_PER_STEP, config.optim, steps)
    )
    trainer = GRPOTrainer(
        optimizers=(optimizer, schedule),
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[StepTimes()],
    )
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    step_s = [ends[i + UPDATES_PER_STEP] - ends[i] for i in range(0, len(ends) - UPDATES_PER_STEP, UPDATES_PER_STEP)]
    eval_after = asyncio.run(held_out_reward(trainer.model.eval(), tokenizer, config))
    return {
        "step_s": step_s,
        "rollout_tokens_per_s": [tokens / s for tokens, s in zip(tokens_per_round, step_s)],
        "rollouts": len(tokens_per_round) * PROMPTS_PER_STEP * GENERATIONS,
        "eval_after": eval_after,
        "wall_s": wall,
    }


def child(framework: str, out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> None:
    if framework == "v1":
        result = run_v1(out, seed, steps, checkpoint, options)
    else:
        result = run_trl(out, seed, steps, checkpoint, options)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def spawn(framework: str, out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    """One (framework, seed) in a fresh process; its result, or an ``error`` with the output's tail."""
    command = [sys.executable, __file__, "--child", framework, "--out", str(out), "--seeds", str(seed), "--steps", str(steps)]
    command += ["--checkpoint", str(checkpoint), "--trl-threads", str(options.trl_threads)]
    command += [
        "--max-staleness",
        str(options.max_staleness),
        "--lr",
        repr(options.lr),
        "--warmup-steps",
        str(options.warmup_steps),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return dict(json.loads(line[len(RESULT_PREFIX) :]))
    return {"error": f"exit {done.returncode}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"}


def summary_line(framework: str, seed: int | str, result: dict[str, Any], eval_before: float) -> str:
    if "error" in result:
        return f"{framework:4} seed {seed}: FAILED {result['error']}"
    step_s = statistics.median(result["step_s"]) if result["step_s"] else float("nan")
    tokens = statistics.median(result["rollout_tokens_per_s"]) if result["rollout_tokens_per_s"] else float("nan")
    return (
        f"{framework:4} seed {seed}: {step_s:.3f} s/step (median of {len(result['step_s'])}), "
        f"rollout {tokens:.0f} tokens/s, held-out {eval_before:.3f} -> {result['eval_after']:.3f} "
        f"after {result['rollouts']} rollouts, {result['wall_s']:.0f} s training"
    )


def trl_installed() -> bool:
    try:
        return importlib.util.find_spec("trl") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_int, nargs="+", default=[0, 1, 2], help="RL seeds (one run each per framework)")
    parser.add_argument("--steps", type=step_count, default=40, help="steps per run (each: one round of 16 x 8 rollouts)")
    parser.add_argument("--frameworks", nargs="+", choices=("v1", "trl"), default=["v1", "trl"])
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/train_vs_trl"), help="checkpoint and run folders")
    parser.add_argument(
        "--trl-threads", type=thread_count, default=0, metavar="N", help="TRL's torch threads (0: torch's default)"
    )
    parser.add_argument(
        "--max-staleness",
        type=staleness,
        default=0,
        metavar="K",
        help="v1 generates up to K steps ahead (0: on-policy, as TRL; 1: the recipe's)",
    )
    parser.add_argument("--lr", type=learning_rate, default=None, help="both frameworks' learning rate (default: the recipe's)")
    parser.add_argument(
        "--warmup-steps",
        type=warmup_count,
        default=None,
        metavar="N",
        help="steps to reach --lr linearly (default: the recipe's)",
    )
    parser.add_argument("--child", choices=("v1", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recipe = recipe_config(args.out, 0, 1, None)
    args.lr = recipe.optim.lr if args.lr is None else args.lr
    args.warmup_steps = recipe.optim.warmup_steps if args.warmup_steps is None else args.warmup_steps
    if args.child:
        child(args.child, args.out, args.seeds[0], args.steps, args.checkpoint, args)
        return 0
    if "trl" in args.frameworks and not trl_installed():
        print("train_vs_trl: TRL is not installed; install the benchmark extra: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"train_vs_trl: cannot use --out {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs", flush=True)
    print(f"lr {args.lr:g}, reached over {args.warmup_steps} warm-up steps; {args.steps} steps", flush=True)
    checkpoint = make_checkpoint(args.out)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(checkpoint), AutoTokenizer.from_pretrained(checkpoint)
    eval_before = asyncio.run(held_out_reward(model, tokenizer, recipe_config(args.out, 0, 1, checkpoint)))
    print(f"SFT checkpoint {checkpoint}: held-out reward {eval_before:.3f}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {framework: [] for framework in args.frameworks}
    for seed in args.seeds:
        for framework in args.frameworks:
            result = spawn(framework, args.out, seed, args.steps, checkpoint, args)
            results[framework].append(result)
            print(summary_line(framework, seed, result, eval_before), flush=True)
    failed = False
    for framework, runs in results.items():
        good = [run for run in runs if "error" not in run]
        failed = failed or len(good) < len(runs)
        if good:
            merged = {
                "step_s": [statistics.median(run["step_s"]) for run in good],
                "rollout_tokens_per_s": [statistics.median(run["rollout_tokens_per_s"]) for run in good],
                "rollouts": good[0]["rollouts"],
                "eval_after": statistics.median(run["eval_after"] for run in good),
                "wall_s": statistics.median(run["wall_s"] for run in good),
            }
            print("median " + summary_line(framework, f"x{len(good)}", merged, eval_before), flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
