"""Offline re-scoring: a saved run's rollouts scored again by an environment's current rewards, without its model.

`SavedRun` reads a run folder (`results.jsonl`, `metadata.json`); `rebuild_state` turns one saved
output back into the `State` its rollout ended with (prompt, completion, trajectory with its tool
calls, artifacts and every other saved field, for the environment's current task of that row);
`rescore_group` runs the environment's reward, metric and advantage functions on a group of them.
Nothing runs a program or opens an endpoint, so the policy model can't be called: a judge that asks
the rollout's own model fails (its reward records the error); a judge with its own client is asked
again. With `repeats` > 1 every group is scored that many times and each function's spread kept.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from v1._util import bounded_json as _bounded_json
from v1._util.run_files import NotARegularFileError, read_regular, read_regular_text
from v1.env._env import Env
from v1.env._results import METADATA_FILE, RESULTS_FILE, EvalSummary, ResultsWriter
from v1.errors import ConfigError, Error
from v1.rollout import State, Task, score_group, score_rollout, thaw

SCORE_FIELDS = ("reward", "metrics", "advantage")
"""What re-scoring replaces; each saved value is kept beside the new one as ``previous_<field>``."""
REQUIRED_FIELDS = ("example_id", "rollout_index", "prompt", "completion", "trajectory")
"""What a saved output needs to be rebuilt (an output without them is left out, as one problem)."""
NOT_STATE_FIELDS = frozenset({*SCORE_FIELDS, "answer", "info", "rollout_index", "attempts", "rescore_spread"})
SCORING_PLACES = ("reward:", "metric:", "advantage:")
"""Where a recorded error came from scoring (the `where` of `State.record_error`)."""
SPREAD_FIELD = "rescore_spread"
"""Per output, with repeats: each function's `{"values", "mean", "std", "min", "max"}` over the repeats."""


@dataclass
class SavedRun:
    """A run folder as re-scoring reads it: its metadata, its rebuildable outputs, and one line per problem."""

    path: Path
    metadata: dict[str, Any]
    outputs: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, path: str | Path) -> SavedRun:
        """Read `path`; outputs that can't be rebuilt become problems, the rest are kept.

        Raises:
            ConfigError: `path` is not a run folder (no `results.jsonl` and `metadata.json` there).
        """
        path = Path(path)
        results, metadata_path = path / RESULTS_FILE, path / METADATA_FILE
        if not path.is_dir() or not os.path.lexists(results) or not os.path.lexists(metadata_path):
            raise ConfigError(f"{path}: not a run folder (it needs {RESULTS_FILE} and {METADATA_FILE}, as v1 eval writes them)")
        try:
            metadata = _bounded_json.loads(read_regular_text(metadata_path), str(metadata_path))
        except (ValueError, NotARegularFileError) as exc:
            raise ConfigError(f"{path}: not a run folder: {exc}") from None
        if not isinstance(metadata, dict):
            raise ConfigError(f"{metadata_path}: expected a JSON object, got {type(metadata).__name__}")
        try:
            raw = read_regular(results)
        except NotARegularFileError as exc:
            raise ConfigError(f"{path}: not a run folder: {exc}") from None
        run = cls(path, metadata, [])
        seen: set[tuple[str, int]] = set()
        with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                run._add(number, line, seen)
        return run

    def _add(self, number: int, line: str, seen: set[tuple[str, int]]) -> None:
        where = f"{RESULTS_FILE} line {number}"
        if not line.strip():
            return
        try:
            output = _bounded_json.loads(line, where)
        except ValueError as exc:
            self.problems.append(f"{exc}; left out")
            return
        if not isinstance(output, dict):
            self.problems.append(f"{where}: not a JSON object; left out")
            return
        missing = [name for name in REQUIRED_FIELDS if name not in output]
        if missing or not isinstance(output["rollout_index"], int) or isinstance(output["example_id"], (dict, list)):
            what = f"no {', '.join(missing)}" if missing else "no usable example_id and rollout_index"
            self.problems.append(f"{where}: {what} (an older v1's format?); left out")
            return
        key = (json.dumps(output["example_id"]), output["rollout_index"])
        if key in seen:
            self.problems.append(f"{where}: example {output['example_id']} rollout {output['rollout_index']} again; left out")
            return
        seen.add(key)
        self.outputs.append(output)

    @property
    def independent_scoring(self) -> bool:
        return bool(self.metadata.get("independent_scoring"))

    def groups(self) -> dict[str, list[dict[str, Any]]]:
        """The outputs by scoring group, in file order: one group per example (per rollout under independent scoring)."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for output in self.outputs:
            unit = json.dumps(output["example_id"])
            if self.independent_scoring:
                unit += f"#{output['rollout_index']}"
            groups.setdefault(unit, []).append(output)
        for outputs in groups.values():
            outputs.sort(key=lambda output: output["rollout_index"])
        return groups


def _user_messages(prompt: Any) -> list[Any]:
    return [message for message in thaw(prompt) or [] if not (isinstance(message, dict) and message.get("role") == "system")]


def current_tasks(env: Env) -> dict[str, Task | Error]:
    """The environment's tasks now by `json.dumps(example_id)` (its evaluation rows, else its training rows);
    a row that no longer makes a task maps to its error."""
    tasks: dict[str, Task | Error] = {}
    for row in env.taskset.eval_rows() or env.taskset.rows():
        try:
            tasks[json.dumps(row.get("example_id"))] = env.to_task(row)
        except Error as exc:
            tasks[json.dumps(row.get("example_id"))] = exc
    return tasks


def task_for(output: Mapping[str, Any], tasks: Mapping[str, Task | Error], env_id: str) -> Task | str:
    """The current task of a saved output, or why it can't be rescored (one line)."""
    name = f"example {output['example_id']} rollout {output['rollout_index']}"
    task = tasks.get(json.dumps(output["example_id"]))
    if task is None:
        return f"{name}: {env_id} has no task with this example_id now; left out"
    if isinstance(task, Error):
        return f"{name}: its row no longer makes a task ({type(task).__name__}: {task}); left out"
    if _user_messages(output["prompt"]) != _user_messages(task.prompt):
        return f"{name}: the task's prompt is not the one the run saved (the row changed); left out"
    return task


def _scoring_error(value: Any) -> bool:
    return isinstance(value, Mapping) and str(value.get("where") or "").startswith(SCORING_PLACES)


def rebuild_state(env: Env, task: Task, output: Mapping[str, Any]) -> State:
    """The state a saved rollout ended with, scores cleared: every saved field but the scores and task fields.

    An error the old scoring recorded is cleared too: the scoring runs again.
    """
    state = env.state_type.for_task(task)
    for key, value in output.items():
        if key in NOT_STATE_FIELDS or key.startswith("previous_") or (key == "error" and _scoring_error(value)):
            continue
        dict.__setitem__(state, key, copy.deepcopy(value))  # the framework restoring its own record, guarded fields too
    return state


async def rescore_group(env: Env, tasks: Sequence[Task], states: list[State]) -> list[State]:
    """The environment's current rewards and metrics on each state, then its group functions and advantages."""
    handlers = env.harness.handlers
    await asyncio.gather(*(score_rollout(handlers, task, state) for task, state in zip(tasks, states)))
    await score_group(handlers, list(tasks), states)
    return states


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "values": values,
        "mean": math.fsum(values) / len(values),
        "std": statistics.pstdev(values),
        "min": min(values),
        "max": max(values),
    }


async def rescore_outputs(
    env: Env, tasks: Sequence[Task], outputs: Sequence[Mapping[str, Any]], repeats: int
) -> list[dict[str, Any]]:
    """One group's new outputs: the saved ones with new scores, the old beside them (``previous_*``).

    With `repeats` > 1 the group is scored that many times; the output's scores are the means and
    `SPREAD_FIELD` holds each function's values over the repeats.
    """
    runs = [await rescore_group(env, tasks, [rebuild_state(env, t, o) for t, o in zip(tasks, outputs)]) for _ in range(repeats)]
    rescored = []
    for position, output in enumerate(outputs):
        states = [run[position] for run in runs]
        first = states[0]
        new = {key: value for key, value in output.items() if not key.startswith("previous_") and key != SPREAD_FIELD}
        new |= {f"previous_{name}": output.get(name) for name in SCORE_FIELDS}
        new |= {key: thaw(value) for key, value in first.items() if key not in NOT_STATE_FIELDS}
        names = list(first.get("metrics") or {})
        series = {name: [float((state.get("metrics") or {}).get(name, 0.0)) for state in states] for name in names}
        series["reward"] = [float(state.get("reward") or 0.0) for state in states]
        new["reward"] = _spread(series["reward"])["mean"]
        new["metrics"] = {name: _spread(series[name])["mean"] for name in names}
        new["advantage"] = math.fsum(float(state.get("advantage") or 0.0) for state in states) / repeats
        if repeats > 1:
            new[SPREAD_FIELD] = {name: _spread(values) for name, values in series.items()}
        rescored.append(new)
    return rescored


@dataclass
class RescoreReport:
    """What `rescore_run` did: the new run's metadata, each function's spread per rollout (with repeats), the problems."""

    metadata: dict[str, Any]
    spreads: dict[str, list[dict[str, Any]]]
    problems: list[str]


KEPT_METADATA = ("env_id", "model", "base_url", "num_examples", "rollouts_per_example", "sampling_args", "independent_scoring")
"""What a rescored run's metadata keeps of its source's (the scores and their aggregates are new)."""


def _previous(run: SavedRun) -> dict[str, Any]:
    summary = EvalSummary()
    for output in run.outputs:
        summary.add(output)
    return {"avg_reward": summary.avg_reward, "avg_metrics": summary.avg_metrics}


def _units(env: Env, run: SavedRun, problems: list[str]) -> dict[str, tuple[list[Task], list[dict[str, Any]]]]:
    tasks = current_tasks(env)
    units: dict[str, tuple[list[Task], list[dict[str, Any]]]] = {}
    for unit, outputs in run.groups().items():
        found = [(task_for(output, tasks, env.env_id), output) for output in outputs]
        problems.extend(task for task, _ in found if isinstance(task, str))
        kept = [(task, output) for task, output in found if not isinstance(task, str)]
        if kept:
            units[unit] = ([task for task, _ in kept], [output for _, output in kept])
    return units


async def rescore_run(
    env: Env, run: SavedRun, writer: ResultsWriter, *, repeats: int = 1, max_concurrent: int = 32
) -> RescoreReport:
    """Score every rebuildable rollout of `run` with `env`'s current functions, `repeats` times; write them to `writer`.

    Groups `writer` already holds whole (a resumed rescore) are kept. At most `max_concurrent` groups are
    scored at once; the env's teardown runs at the end, and the writer is closed.
    """
    problems = list(run.problems)
    units = _units(env, run, problems)
    summary = EvalSummary(env.pass_threshold)
    planned = {unit: [(o["example_id"], o["rollout_index"]) for o in outputs] for unit, (_, outputs) in units.items()}
    done = await asyncio.to_thread(writer.load, planned, summary)
    spreads: dict[str, list[dict[str, Any]]] = {}
    limit = asyncio.Semaphore(max_concurrent)

    async def one(tasks: list[Task], outputs: list[dict[str, Any]]) -> None:
        async with limit:
            rescored = await rescore_outputs(env, tasks, outputs, repeats)
        await writer.write(rescored)
        for output in rescored:
            summary.add(output)
            for name, spread in (output.get(SPREAD_FIELD) or {}).items():
                spreads.setdefault(name, []).append(spread)

    try:
        await asyncio.gather(*(one(*units[unit]) for unit in units if unit not in done))
    finally:
        await env.teardown()
    metadata = {key: run.metadata[key] for key in KEPT_METADATA if key in run.metadata}
    metadata |= summary.metadata() | {"previous": _previous(run), "problems": problems}
    await writer.write_metadata(metadata)
    await writer.close()
    return RescoreReport(metadata, spreads, problems)


__all__ = [
    "KEPT_METADATA",
    "REQUIRED_FIELDS",
    "SCORE_FIELDS",
    "SCORING_PLACES",
    "SPREAD_FIELD",
    "RescoreReport",
    "SavedRun",
    "current_tasks",
    "rebuild_state",
    "rescore_group",
    "rescore_outputs",
    "rescore_run",
    "task_for",
]
