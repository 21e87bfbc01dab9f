"""`v1 validate CONFIG_OR_ENV_ID`: every task's setup and its gold solution, scored, without a model.

Each task runs as a rollout does (the harness's sandbox, tools, setup, update, reward and cleanup
handlers) with the taskset's `gold` program in place of the harness's program and no model
behind the endpoint (`v1.env.NoModelClient`). A task passes when nothing failed and its reward
reaches the taskset's `validate_threshold`. The run folder (``results.jsonl``, ``metadata.json``)
is an eval run folder, each output with its `validation` verdict; `v1 view` shows it. Prints one
``FAIL`` line per failing task naming the stage (task, setup, gold, scoring, cleanup) and why.

Exit status: 0 every task passed, 1 some failed, 2 bad input (nothing ran).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from typing import Any

from v1._util import loop_scope as loop_scope
from v1._util.terminal import printable
from v1.cli._eval import load_env, parse_overrides
from v1.env import (
    METADATA_FILE,
    RESULTS_FILE,
    Env,
    ValidationWriter,
    create_run_folder,
    environment_config_file,
    gold_env,
    run_gold,
    validate_threshold,
)
from v1.errors import ConfigError, Error

DEFAULT_OUTPUT_DIR = "outputs/validate"
SAVED_FIELD = "validate_settings"
"""The `metadata.json` field holding what the validation was given (`--resume` checks it)."""


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "validate",
        help="run every task's setup and gold solution through its scoring, without a model",
        description="Check an environment's tasks without a model: each task's setup, then its taskset's gold "
        "solution in place of the harness's program, scored by the taskset's rewards. Extra flags "
        "--taskset.FIELD VALUE and --harness.FIELD VALUE override the environment's config.",
    )
    parser.add_argument("env", metavar="CONFIG_OR_ENV_ID", help="a TOML config file or an environment module/id")
    parser.add_argument("-n", "--num-examples", type=int, default=-1, help="tasks to check (-1: all; default -1)")
    parser.add_argument("-c", "--max-concurrent", type=int, default=8, help="most tasks in flight (default 8)")
    parser.add_argument("--only-setup", action="store_true", help="run each task's setup (and cleanup) only: no gold, no scoring")
    parser.add_argument(
        "--resume", metavar="PATH", help="finish the validation in PATH: tasks that passed are kept, the rest run again"
    )
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, help=f"where run folders go (default {DEFAULT_OUTPUT_DIR})")
    parser.set_defaults(run=run, accepts_extra_args=True)


def _check_counts(args: argparse.Namespace) -> None:
    if args.num_examples != -1 and args.num_examples < 1:
        raise ConfigError(f"-n/--num-examples: must be at least 1, or -1 for all (got {args.num_examples})")
    if args.max_concurrent < 1:
        raise ConfigError(f"-c/--max-concurrent: must be at least 1 (got {args.max_concurrent})")


def _writer(args: argparse.Namespace, env: Env, settings: dict[str, Any], threshold: float) -> ValidationWriter:
    """A fresh run folder, or the `--resume` folder after checking it is a validation of the same tasks."""
    extra = {SAVED_FIELD: settings}
    if args.resume is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = create_run_folder(args.output_dir, f"{env.env_id}--validate--{stamp}")
        return ValidationWriter(folder, extra, threshold=threshold, only_setup=args.only_setup)
    writer = ValidationWriter(args.resume, extra, threshold=threshold, only_setup=args.only_setup)
    if not writer.metadata_path.is_file():
        raise ConfigError(f"--resume {args.resume}: no {METADATA_FILE} there; pass the folder of an earlier validation")
    saved = writer.read_metadata().get(SAVED_FIELD)
    if not isinstance(saved, dict):
        raise ConfigError(f"--resume {args.resume}: not a validation run folder (its {METADATA_FILE} has no {SAVED_FIELD})")
    differences = [
        f"{key} (saved {saved.get(key)!r}, now {value!r})" for key, value in settings.items() if saved.get(key) != value
    ]
    if differences:
        raise ConfigError(f"--resume {args.resume}: the saved validation differs in {'; '.join(differences)}")
    return writer


def _saved_outputs(writer: ValidationWriter) -> list[dict[str, Any]]:
    path = writer.path / RESULTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _rows(env: Env, n: int) -> list[dict[str, Any]]:
    """The first `n` (all when -1) of the rows an eval runs: the evaluation rows, else the training rows."""
    rows = env.taskset.eval_rows() or env.taskset.rows()
    return rows[:n] if n > 0 else list(rows)


def _task_failures(env: Env, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows that make a task, and one FAIL line per row that does not."""
    good, failures = [], []
    for row in rows:
        try:
            env.to_task(row)
        except Error as exc:
            failures.append(f"FAIL example {row.get('example_id')} [task]: {type(exc).__name__}: {exc}")
            continue
        good.append(row)
    return good, failures


def _example_order(line: str) -> tuple[int, int | str]:
    """FAIL lines in example order (numbers as numbers), however the rollouts finished."""
    example = line.split(" ", 3)[2]
    return (0, int(example)) if example.isdigit() else (1, example)


def _show_warnings() -> None:
    """v1's warnings (e.g. "no eval split") as ``v1 validate: warning: ...`` lines, unless logging is set up already."""
    if not logging.getLogger().handlers and not logging.getLogger("v1").handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("v1 validate: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("v1").addHandler(handler)


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(printable(line), file=sys.stderr, flush=True)

    _show_warnings()

    try:
        _check_counts(args)
        taskset_overrides, harness_overrides = parse_overrides(getattr(args, "extra", []))
        target = environment_config_file(args.env)
        env = load_env(target, taskset_overrides, harness_overrides)
        checked = gold_env(env, only_setup=args.only_setup)
        threshold = validate_threshold(env)
        rows, failures = _task_failures(env, _rows(env, args.num_examples))
        settings = {"env_id": env.env_id, "only_setup": args.only_setup, "threshold": threshold}
        writer = _writer(args, env, settings, threshold)
    except Error as exc:
        say(f"v1 validate: error: {exc}")
        return 2
    metadata = loop_scope.run(run_gold(checked, rows, writer, args.max_concurrent))
    outputs = _saved_outputs(writer)
    total = len(outputs) + len(failures)
    for output in outputs:
        result = writer.verdict(output)
        if not result["passed"]:
            failures.append(f"FAIL example {output.get('example_id')} [{result['stage']}]: {result['reason']}")
    writer.extra_metadata[writer.field] = {"checked": total, "failed": len(failures), "threshold": threshold}
    writer.write_metadata_now(metadata)
    for line in sorted(failures, key=_example_order):
        print(line, flush=True)
    what = "setups" if args.only_setup else "tasks"
    outcome = f"{len(failures)} of {total} {what} failed" if failures else f"all {total} {what} passed"
    threshold_note = "" if args.only_setup else f" (threshold {threshold:g})"
    print(f"v1 validate: {outcome}{threshold_note}; results: {writer.path}", flush=True)
    return 1 if failures else 0


__all__ = ["DEFAULT_OUTPUT_DIR", "add_parser", "run"]
