"""`v1 train CONFIG.toml` (RL) and `v1 sft CONFIG.toml` (supervised fine-tuning).

The config is a `TrainConfig` TOML (see docs/training.md and configs/train/). Bad input
(a missing file, an unknown field, a bad value) is one line on stderr and exit code 2;
Ctrl-C is exit 130 (the latest checkpoint stays; continue with ``--resume``). torch and
transformers are imported only when a command runs, so ``v1 --help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from v1.errors import ConfigError, Error

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def add_parser(commands: Any) -> None:
    train = commands.add_parser("train", help="RL-train a model on an environment (TOML training config)")
    train.add_argument(
        "config",
        metavar="CONFIG",
        help="a training config (configs/train/*.toml); or `export CHECKPOINT OUT`: a checkpoint as one Hugging Face folder",
    )
    train.add_argument("export_paths", nargs="*", metavar="CHECKPOINT OUT", help=argparse.SUPPRESS)
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the output folder")
    train.add_argument("--max-steps", type=int, default=None, help="override max_steps")
    train.add_argument("--output-dir", default=None, help="override output_dir")
    train.add_argument("--no-progress", action="store_true", help="no live progress bar")
    train.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="N trainer ranks (FSDP2) on this machine, started, placed and stopped together with the engine "
        "(torchrun --standalone underneath; on GPUs rank i trains on GPU i and vLLM gets the next)",
    )
    train.set_defaults(run=run_train)
    sft = commands.add_parser("sft", help="supervised fine-tuning on reference answers or saved rollouts (TOML config)")
    sft.add_argument("config", metavar="CONFIG", help="a training config with an [sft] section")
    sft.add_argument("--output-dir", default=None, help="override output_dir")
    sft.set_defaults(run=run_sft)


def load_config(args: argparse.Namespace) -> Any:
    from v1.train import TrainConfig

    if not str(args.config).endswith(".toml"):
        raise ConfigError(f"{args.config}: expected a .toml training config")
    config = TrainConfig.load(args.config)
    updates: dict[str, Any] = {}
    if getattr(args, "max_steps", None) is not None:
        if args.max_steps < 0:
            raise ConfigError(f"--max-steps must be >= 0, got {args.max_steps}")
        updates["max_steps"] = args.max_steps
    if args.output_dir is not None:
        updates["output_dir"] = args.output_dir
    config = config.model_copy(update=updates) if updates else config
    config.check_output_dir()  # a file in its place is one line before torch is imported; nothing is written yet
    return config


def rank_arguments(args: argparse.Namespace) -> list[str]:
    """The ``python -m v1.train`` arguments each rank of ``--nproc`` gets: these, without ``--nproc``."""
    extra = ["--resume"] if args.resume else []
    extra += ["--max-steps", str(args.max_steps)] if args.max_steps is not None else []
    extra += ["--output-dir", args.output_dir] if args.output_dir is not None else []
    extra += ["--no-progress"] if args.no_progress else []
    return [args.config, *extra]


def launch_ranks(args: argparse.Namespace, errors: Console) -> int:
    """``--nproc N``: torchrun's launcher in this process over N ranks of ``python -m v1.train``.

    The ranks end with this process however it ends, from their first instruction (`v1.train._rank_entry`: the
    kernel signals them when this process exits); one failed rank ends the others.
    """
    from pathlib import Path

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    import v1.train

    entry = Path(v1.train.__file__).with_name("_rank_entry.py")
    os.environ["V1_LAUNCHER_PID"] = str(os.getpid())  # the ranks' parent: torchrun's agent runs in this process
    try:
        torchrun(["--standalone", "--nproc-per-node", str(args.nproc), str(entry), *rank_arguments(args)])
    except ChildFailedError as exc:
        failures = ", ".join(f"rank {failure.local_rank} exited {failure.exitcode}" for failure in exc.failures.values())
        errors.print(f"v1 train: the run failed: {failures} (see their lines above)", markup=False, highlight=False)
        return 1
    return 0


def run_export(args: argparse.Namespace, console: Console, errors: Console) -> int:
    """``v1 train export CHECKPOINT OUT``: a checkpoint (sharded per rank, or one process's) as one Hugging Face folder."""
    try:
        if len(args.export_paths) != 2:
            raise ConfigError("v1 train export takes CHECKPOINT OUT: a checkpoints/step_N folder and a new folder")
        checkpoint, out = (Path(path) for path in args.export_paths)
        if not (checkpoint / "run.json").is_file():
            raise ConfigError(f"v1 train export: {checkpoint}: not a complete checkpoint (no run.json in it)")
        from v1.train import export_checkpoint

        folder = export_checkpoint(checkpoint, out)
    except (Error, ImportError) as exc:
        errors.print(f"v1 train: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    console.print(f"v1 train export: {checkpoint} -> {folder}", markup=False, highlight=False, soft_wrap=True)
    return 0


def run_train(args: argparse.Namespace) -> int:
    console, errors = Console(), Console(stderr=True)
    if args.config == "export":
        return run_export(args, console, errors)
    try:
        if args.export_paths:
            raise ConfigError(f"unrecognized arguments: {' '.join(args.export_paths)}")
        config = load_config(args)
        if args.nproc < 1:
            raise ConfigError(f"--nproc must be >= 1, got {args.nproc}")
        if args.nproc > 1:
            from v1.train import check_before_loading, under_torchrun

            if under_torchrun():
                raise ConfigError("--nproc starts the ranks itself: not under torchrun (which already started them)")
            check_before_loading(config, args.nproc)  # before any rank starts: a refusal costs no model load
            del config  # checked here in one line; each rank loads it again
            return launch_ranks(args, errors)
        from transformers.utils import logging as transformers_logging

        from v1.train import train

        transformers_logging.disable_progress_bar()  # one "Writing model shards" bar per checkpoint is noise here

        leader = os.environ.get("RANK", "0") == "0"  # under torchrun only rank 0 shows progress
        result = asyncio.run(train(config, resume=args.resume, progress=leader and not args.no_progress))
    except KeyboardInterrupt:
        errors.print("v1 train: interrupted; continue with --resume", markup=False, highlight=False)
        return EXIT_INTERRUPTED
    except (Error, ImportError) as exc:
        errors.print(f"v1 train: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return int(getattr(exc, "exit_status", EXIT_BAD_INPUT))  # a diverged run (`TrainingDiverged`) is 3
    if result.rank != 0:
        return 0
    before = "-" if result.eval_before is None else f"{result.eval_before:.3f}"
    after = "-" if result.eval_after is None else f"{result.eval_after:.3f}"
    console.print(
        f"v1 train: {result.steps} steps in {result.wall_time_s:.0f} s; held-out reward {before} -> {after}\n"
        f"outputs: {result.output_dir} (metrics.jsonl, plot.png, summary.json, checkpoints/)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return 0


def run_sft(args: argparse.Namespace) -> int:
    console, errors = Console(), Console(stderr=True)
    try:
        config = load_config(args)
        from v1.train import run_sft as sft

        result = sft(config)
    except KeyboardInterrupt:
        errors.print("v1 sft: interrupted", markup=False, highlight=False)
        return EXIT_INTERRUPTED
    except (Error, ImportError) as exc:
        errors.print(f"v1 sft: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return int(getattr(exc, "exit_status", EXIT_BAD_INPUT))
    first, last = result.metrics[0]["loss"], result.metrics[-1]["loss"]
    console.print(
        f"v1 sft: {result.sft_steps} steps in {result.wall_time_s:.0f} s, loss {first:.3f} -> {last:.3f}; "
        f"model: {result.output_dir / 'sft' / 'model'}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return 0


__all__ = ["add_parser", "load_config", "run_sft", "run_train"]
