"""`v1 rescore RUN_DIR CONFIG_OR_ENV_ID`: a saved run scored again by the environment's current rewards.

Each saved rollout is rebuilt (its task as the environment has it now, its prompt, completion,
trajectory, artifacts and saved columns) and scored by the environment's current reward, metric,
group and advantage functions, judges included; no program runs and the policy model is never
called. The environment is named on the command line, like ``v1 eval --resume``: a run folder
never chooses the code that runs. ``-r N`` scores every rollout N times and reports each
function's spread (a judge's variance). The new run folder names its source (`rescored_from`)
and keeps each rollout's old scores beside the new (``previous_reward``, ``previous_metrics``,
``previous_advantage``); ``--resume PATH`` finishes an interrupted rescore.

Exit status: 0 rescored, 1 nothing could be rescored, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Any

from v1._util import loop_scope as loop_scope
from v1._util.terminal import printable
from v1.cli._eval import load_env, parse_overrides
from v1.env import Env, ResultsWriter, SavedRun, create_run_folder, environment_config_file, rescore_run
from v1.errors import ConfigError, Error

DEFAULT_OUTPUT_DIR = "outputs/rescores"
SOURCE_FIELD = "rescored_from"
"""The `metadata.json` field naming the run folder a rescore read."""
MAX_REPEATS = 100


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "rescore",
        help="score a saved run again with an environment's current rewards, without the policy model",
        description="Score the rollouts of a saved run (a v1 eval run folder) again with the environment's current "
        "rewards, metrics and judges; no program runs and the policy model is never called. Extra flags "
        "--taskset.FIELD VALUE and --harness.FIELD VALUE override the environment's config.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the saved run: a folder holding results.jsonl and metadata.json")
    parser.add_argument(
        "env", nargs="?", metavar="CONFIG_OR_ENV_ID", help="the environment whose scoring to use (a TOML config or an id)"
    )
    parser.add_argument(
        "-r", "--repeats", type=int, default=1, help="score each rollout N times and report the spread (default 1)"
    )
    parser.add_argument("-c", "--max-concurrent", type=int, default=32, help="most groups scored at once (default 32)")
    parser.add_argument("--resume", metavar="PATH", help="finish the rescore in PATH (the same RUN_DIR and environment)")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=f"where run folders go (default {DEFAULT_OUTPUT_DIR})")
    parser.set_defaults(run=run, accepts_extra_args=True)


def _check(args: argparse.Namespace, run: SavedRun) -> str:
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise ConfigError(f"-r/--repeats: must be 1 to {MAX_REPEATS} (got {args.repeats})")
    if args.max_concurrent < 1:
        raise ConfigError(f"-c/--max-concurrent: must be at least 1 (got {args.max_concurrent})")
    if args.env is None:
        saved = (run.metadata.get("eval_settings") or {}).get("env") or run.metadata.get("env_id")
        made = f" (the run was made with {saved!r})" if isinstance(saved, str) else ""
        raise ConfigError(
            f"name the environment to score with: v1 rescore {args.run_dir} CONFIG_OR_ENV_ID{made}; "
            "a run folder never chooses the code that runs"
        )
    return environment_config_file(args.env)


def _writer(args: argparse.Namespace, run: SavedRun, env: Env) -> ResultsWriter:
    source = str(run.path.resolve())
    settings = {SOURCE_FIELD: source, "rescore": {"env_id": env.env_id, "repeats": args.repeats}}
    if args.resume is None:
        name = f"{run.path.resolve().name}--rescore"
        return ResultsWriter(create_run_folder(args.output_dir, name), settings)
    writer = ResultsWriter.resuming(args.resume, extra_fields=[SOURCE_FIELD, "rescore"])
    saved = writer.extra_metadata
    if saved.get(SOURCE_FIELD) != source or saved.get("rescore") != settings["rescore"]:
        raise ConfigError(
            f"--resume {args.resume}: it rescored {saved.get(SOURCE_FIELD)!r} with {saved.get('rescore')!r}, "
            f"not {source!r} with {settings['rescore']!r}"
        )
    return writer


def _spread_lines(spreads: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = []
    for name, per_rollout in sorted(spreads.items()):
        stds = [spread["std"] for spread in per_rollout]
        values = [value for spread in per_rollout for value in spread["values"]]
        lines.append(
            f"  {name}: mean {math.fsum(values) / len(values):.3f}, std {math.fsum(stds) / len(stds):.3f} "
            f"(largest {max(stds):.3f}), min {min(values):g}, max {max(values):g}"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(printable(line), file=sys.stderr, flush=True)

    if not logging.getLogger().handlers and not logging.getLogger("v1").handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("v1 rescore: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("v1").addHandler(handler)
    try:
        saved = SavedRun.read(args.run_dir)
        target = _check(args, saved)
        taskset_overrides, harness_overrides = parse_overrides(getattr(args, "extra", []))
        env = load_env(target, taskset_overrides, harness_overrides)
        writer = _writer(args, saved, env)
    except Error as exc:
        say(f"v1 rescore: error: {exc}")
        return 2
    report = loop_scope.run(rescore_run(env, saved, writer, repeats=args.repeats, max_concurrent=args.max_concurrent))
    metadata, spreads, problems = report.metadata, report.spreads, report.problems
    for problem in problems:
        say(f"v1 rescore: {problem}")
    count = metadata["num_rollouts"]
    previous = metadata["previous"]["avg_reward"]
    print(f"v1 rescore: {count} rollouts of {args.run_dir} rescored ({len(problems)} left out)", flush=True)
    print(f"avg reward {metadata['avg_reward']:.3f} (was {previous:.3f})", flush=True)
    for name, value in metadata["avg_metrics"].items():
        was = metadata["previous"]["avg_metrics"].get(name)
        print(f"  {name}: {value:.3f}" + (f" (was {was:.3f})" if was is not None else " (new)"), flush=True)
    if spreads:
        print(f"spread over {args.repeats} repeats (per rollout):", flush=True)
        for line in _spread_lines(spreads):
            print(line, flush=True)
    print(f"results: {writer.path}", flush=True)
    return 0 if count else 1


__all__ = ["DEFAULT_OUTPUT_DIR", "SOURCE_FIELD", "add_parser", "run"]
