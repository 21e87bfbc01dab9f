"""v1's trainer against TRL's GRPOTrainer at equal work: s/step, rollout tokens/s, held-out reward.

    python benchmarks/train_vs_trl.py                       # both, seeds 0 1 2, 40 steps each
    python benchmarks/train_vs_trl.py --seeds 0 --steps 80 --frameworks v1
    python benchmarks/train_vs_trl.py --lr 3e-3 --warmup-steps 0     # the earlier setting: 3e-3 from the first step
    python benchmarks/train_vs_trl.py --shape qwen2.5-0.5b --seeds 0  # Qwen2.5-0.5B's shape, random weights, 3 steps

Equal work: the recipe's tiny model (`configs/train/tiny_first_letter.toml`) after ONE SFT
warm-up, saved once and loaded by both; the first_letter task (same prompts, same reward
function, same 400 training strings); per step 16 prompts x 8 generations, at most 4 tokens
at temperature 1, 2 optimizer updates on them in micro-batches of 64 (v1: `updates_per_step = 2`;
TRL: `num_iterations = 2`, `gradient_accumulation_steps = 2`); the GRPO loss (per-sequence
mean, clip 0.2), advantages reward minus the group mean without std scaling (v1's default;
TRL `scale_rewards = "none"`), no KL (`beta = 0`), the same fused AdamW (v1's trainer's in one CPU process) at the recipe's learning rate (2e-3,
reached linearly over its first 10 steps; TRL gets the same schedule as a `LambdaLR` over its
optimizer updates, two per step), gradient norm clipped at 1.0; the same seed for each pair; the
same optimizer (`torch.optim.AdamW` with v1's CPU arguments, `fused=True`, TRL's given through
`optimizers=`). v1 keeps every group (`filter_zero_variance =
false`: TRL trains on every group too) and is on-policy like TRL (`max_staleness = 0`;
`--max-staleness 1` is the recipe's overlap, generating one step ahead); every rollout goes
through the harness and the interception endpoint (recorded) to the built-in server. TRL generates each round in process with
`model.generate` (no server, no endpoint) and trains on the same process's two cores.

Equal threads: both run on the same `--threads` cores (default: every core this process may use),
each child pinned to them (`sched_setaffinity`); TRL trains with that many torch threads, v1
splits them as a run does (the built-in engine's thread, the trainer's `trainer_cpu_threads`, which counts the cores
of the pinned mask, not the machine's).

`--shape qwen2.5-0.5b`: Qwen2.5-0.5B's dimensions (vocabulary 151,936, hidden 896, 24 layers,
14 heads, 2 KV heads, intermediate 4,864, tied embeddings; 494M parameters), randomly
initialised from a Qwen2 config with the tiny recipe's byte tokenizer padded to its vocabulary
(`TinyModelConfig.vocab_size`; no download), saved once and loaded by both; no SFT and no
held-out eval (a random model scores 0); per step 2 prompts x 4 generations of 4 tokens in one
micro-batch of 8, 2 updates; 3 steps by default. Both shapes print each run's peak RSS.

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
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "configs" / "train" / "tiny_first_letter.toml"
sys.path.insert(0, str(ROOT))

UPDATES_PER_STEP = 2
MAX_TOKENS = 4
RESULT_PREFIX = "RESULT "


@dataclass(frozen=True)
class Shape:
    """A model and the work per step the two frameworks run on it."""

    prompts_per_step: int
    generations: int
    micro_batch: int
    default_steps: int
    tiny: dict[str, Any] | None = None
    """The model built from this config (random weights, no SFT, no eval); None: the recipe's SFT checkpoint."""


SHAPES = {
    "tiny": Shape(prompts_per_step=16, generations=8, micro_batch=64, default_steps=40),
    "qwen2.5-0.5b": Shape(
        prompts_per_step=2,
        generations=4,
        micro_batch=8,
        default_steps=3,
        tiny={
            "architecture": "qwen2",
            "vocab_size": 151_936,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32_768,
            "tie_word_embeddings": True,
            "seed": 0,
        },
    ),
}


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
    cores = len(os.sched_getaffinity(0))
    if not 1 <= value <= cores:
        raise argparse.ArgumentTypeError(f"between 1 and the {cores} cores this process may use, got {value}")
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
    shape: Shape = SHAPES["tiny"],
) -> Any:
    """The recipe at equal work: the SFT checkpoint as the model (or the tiny config, to make it), every group kept.

    `lr` and `warmup_steps` default to the recipe's.
    """
    from v1.train import TrainConfig

    config = TrainConfig.load(RECIPE)
    lr = config.optim.lr if lr is None else lr
    warmup_steps = config.optim.warmup_steps if warmup_steps is None else warmup_steps
    update: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": steps,
        "seed": seed,
        "micro_batch_size": shape.micro_batch,
    }
    if checkpoint is not None:
        update["model"] = config.model.model_copy(update={"path": str(checkpoint), "tiny": None})
        update["sft"] = config.sft.model_copy(update={"warmup": False})
    rollouts = {
        "examples_per_step": shape.prompts_per_step,
        "rollouts_per_example": shape.generations,
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
    update["eval"] = config.eval.model_copy(update={"at_start": False, "at_end": shape.tiny is None, "every": 0})
    return config.model_copy(update=update)


def shape_model(shape: Shape) -> Any:
    """The shape's model config, past the tiny bound on purpose: this script's own shapes, never a config file's."""
    from v1.config import TinyModelConfig

    class ShapeModelConfig(TinyModelConfig):
        max_parameters: ClassVar[int] = 1_000_000_000

    return ShapeModelConfig(shape.tiny or {})


def make_checkpoint(out: Path, shape: Shape) -> Path:
    """The recipe's SFT warm-up, once: ``out/sft/model`` (model and tokenizer); or the shape's random model."""
    if shape.tiny is not None:
        from v1.inference import save_tiny_model

        folder = out / "random_model"
        if not (folder / "config.json").exists():
            save_tiny_model(shape_model(shape), folder)
        return folder
    from v1.train import run_sft

    config = recipe_config(out, 0, 1, None)
    run_sft(config)
    return out / "sft" / "model"


def peak_rss_mib() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def held_out_reward(model: Any, tokenizer: Any, config: Any) -> float:
    """v1's held-out eval (the recipe's `[eval]`: every held-out string, greedy) of `model` on the built-in server."""
    from v1.env import load_environment
    from v1.inference import InferenceServer
    from v1.train._run import evaluate

    env = load_environment(config.env.id, taskset=config.env.taskset, harness=config.env.harness)
    async with InferenceServer(model, tokenizer, model_name=config.inference.model_name) as server:
        return await evaluate(env, config, config.inference.client_config(server.url))


def run_v1(out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    from v1.train import train

    shape = SHAPES[options.shape]
    config = recipe_config(
        out / f"v1_seed{seed}", seed, steps, checkpoint, options.max_staleness, options.lr, options.warmup_steps, shape
    )
    started = time.perf_counter()
    result = asyncio.run(train(config))
    wall = time.perf_counter() - started
    return {
        "step_s": [m["step_time_s"] for m in result.metrics],
        "rollout_tokens_per_s": [m["rollout_tokens_per_s"] for m in result.metrics],
        "rollouts": sum(m["groups_finished"] for m in result.metrics) * shape.generations,
        "eval_after": result.eval_after,
        "wall_s": wall,
        "peak_rss_mib": peak_rss_mib(),
    }


def run_trl(out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tasksets.first_letter import first_letter, train_rows
    from v1.train._trainer import lr_factor

    torch.set_num_threads(options.threads)
    shape = SHAPES[options.shape]
    config = recipe_config(out, seed, steps, checkpoint, 0, options.lr, options.warmup_steps, shape)
    tokens_per_round: list[int] = []
    ends: list[float] = []

    def reward(completions: list[Any], answer: list[str], completion_ids: list[list[int]], **_: Any) -> list[float | None]:
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
        per_device_train_batch_size=shape.micro_batch,
        gradient_accumulation_steps=shape.prompts_per_step * shape.generations // shape.micro_batch,
        num_generations=shape.generations,
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
    # v1's trainer's AdamW on CPU, argument for argument (`PolicyTrainer`: fused, one pass per tensor)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.optim.lr, betas=config.optim.betas, weight_decay=0.0, foreach=False, fused=True
    )
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
    rss = peak_rss_mib()  # before the eval's server
    trained = trainer.model
    assert trained is not None
    eval_after = asyncio.run(held_out_reward(trained.eval(), tokenizer, config)) if config.eval.at_end else None
    return {
        "step_s": step_s,
        "rollout_tokens_per_s": [tokens / s for tokens, s in zip(tokens_per_round, step_s)],
        "rollouts": len(tokens_per_round) * shape.prompts_per_step * shape.generations,
        "eval_after": eval_after,
        "wall_s": wall,
        "peak_rss_mib": rss,
    }


def child(framework: str, out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> None:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: options.threads])  # both frameworks on the same cores
    if framework == "v1":
        result = run_v1(out, seed, steps, checkpoint, options)
    else:
        result = run_trl(out, seed, steps, checkpoint, options)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def spawn(framework: str, out: Path, seed: int, steps: int, checkpoint: Path, options: argparse.Namespace) -> dict[str, Any]:
    """One (framework, seed) in a fresh process; its result, or an ``error`` with the output's tail."""
    command = [sys.executable, __file__, "--child", framework, "--out", str(out), "--seeds", str(seed), "--steps", str(steps)]
    command += ["--checkpoint", str(checkpoint), "--threads", str(options.threads), "--shape", options.shape]
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


def summary_line(framework: str, seed: int | str, result: dict[str, Any], eval_before: float | None) -> str:
    if "error" in result:
        return f"{framework:4} seed {seed}: FAILED {result['error']}"
    step_s = statistics.median(result["step_s"]) if result["step_s"] else float("nan")
    tokens = statistics.median(result["rollout_tokens_per_s"]) if result["rollout_tokens_per_s"] else float("nan")
    held_out = (
        f"held-out {eval_before:.3f} -> {result['eval_after']:.3f} "
        if eval_before is not None and result["eval_after"] is not None
        else ""
    )
    return (
        f"{framework:4} seed {seed}: {step_s:.3f} s/step (median of {len(result['step_s'])}), "
        f"rollout {tokens:.0f} tokens/s, {held_out}after {result['rollouts']} rollouts, "
        f"{result['wall_s']:.0f} s training, peak RSS {result['peak_rss_mib']:.0f} MiB"
    )


def trl_installed() -> bool:
    try:
        return importlib.util.find_spec("trl") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seed_int, nargs="+", default=[0, 1, 2], help="RL seeds (one run each per framework)")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="tiny", help="the model and work per step (see above)")
    parser.add_argument("--steps", type=step_count, default=None, help="steps per run (default: tiny 40, qwen2.5-0.5b 3)")
    parser.add_argument("--frameworks", nargs="+", choices=("v1", "trl"), default=["v1", "trl"])
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/train_vs_trl"), help="checkpoint and run folders")
    parser.add_argument(
        "--threads",
        type=thread_count,
        default=len(os.sched_getaffinity(0)),
        metavar="N",
        help="cores both frameworks run on, pinned; TRL's torch threads (default: every core this process may use)",
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
    shape = SHAPES[args.shape]
    args.steps = shape.default_steps if args.steps is None else args.steps
    recipe = recipe_config(args.out, 0, 1, None)
    args.lr = recipe.optim.lr if args.lr is None else args.lr
    args.warmup_steps = recipe.optim.warmup_steps if args.warmup_steps is None else args.warmup_steps
    if args.child:
        child(args.child, args.out, args.seeds[0], args.steps, args.checkpoint, args)
        return 0
    if "trl" in args.frameworks and not trl_installed():
        print("train_vs_trl: TRL is not installed; install the benchmark extra: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    if shape.tiny is not None:
        args.out = args.out / args.shape
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"train_vs_trl: cannot use --out {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs, both on {args.threads}", flush=True)
    print(
        f"shape {args.shape}: {shape.prompts_per_step} x {shape.generations} rollouts a step; "
        f"lr {args.lr:g}, reached over {args.warmup_steps} warm-up steps; {args.steps} steps",
        flush=True,
    )
    checkpoint = make_checkpoint(args.out, shape)
    eval_before = None
    if shape.tiny is None:
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
                "eval_after": statistics.median(run["eval_after"] for run in good) if eval_before is not None else None,
                "wall_s": statistics.median(run["wall_s"] for run in good),
                "peak_rss_mib": statistics.median(run["peak_rss_mib"] for run in good),
            }
            print("median " + summary_line(framework, f"x{len(good)}", merged, eval_before), flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
