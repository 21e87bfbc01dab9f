"""What `v1 eval` shows: the live progress view while it runs and the summary table at the end."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from v1._util.terminal import printable
from v1.env import EvalSummary, RolloutKey
from v1.types import GenerateMetadata, RolloutOutput

ERROR_LINE_CHARS = 300
logger = logging.getLogger(__name__)


class LiveView:
    """A rich progress bar: rollouts done/total, rate, running mean reward, errors and retries.

    Errors and retries count as they happen: a group being re-run shows in `retries`
    before it finishes, and the first error of each type is printed above the bar
    with its message (the rest are counted, and listed by type in the summary table).
    """

    def __init__(self, console: Console, total: int | None, title: str, live: bool = True) -> None:
        self.live, self.total = live, total
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} rollouts/s"),
            TextColumn("reward {task.fields[reward]:.3f}"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("retries {task.fields[retries]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not live,
        )
        self.task: TaskID = self.progress.add_task(title, total=total, rate=0.0, reward=0.0, errors=0, retries=0)
        self.start = time.perf_counter()
        self.first: int | None = None
        self.summary: EvalSummary | None = None
        self.retrying: Counter[RolloutKey] = Counter()
        self.reported: set[str] = set()

    def update(self, outputs: list[RolloutOutput], summary: EvalSummary) -> None:
        """A group finished (or the run started, with `outputs` empty)."""
        if self.first is None:
            self.first = summary.count
        self.summary = summary
        for output in outputs:
            self.retrying.pop((output["example_id"], output["rollout_index"]), None)  # now in summary.retries
            self.report(output.get("error"), output.get("example_id"))
        self.refresh()

    def retry(self, keys: list[RolloutKey], errors: list[Mapping[str, Any]]) -> None:
        """A group is being re-run after the errors of its last attempt."""
        self.retrying.update(keys)
        for error in errors:
            self.report(error, keys[0][0] if keys else None, retried=True)
        self.refresh()

    def report(self, error: Mapping[str, Any] | None, example_id: Any, *, retried: bool = False) -> None:
        if not error or str(error.get("type")) in self.reported:
            return
        self.reported.add(str(error.get("type")))
        message = " ".join(str(error.get("message", "")).split())[:ERROR_LINE_CHARS]
        then = "; retrying its group" if retried else ""
        self.progress.console.print(
            printable(
                f"v1 eval: example {example_id}: {error.get('type')} ({error.get('where')}): {message}{then} "
                "(further errors of this type are counted, not printed)"
            ),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    def refresh(self) -> None:
        summary = self.summary
        if summary is None:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        if not self.live:
            logger.info(
                "%s/%s rollouts, reward %.3f, errors %s, retries %s",
                summary.count,
                self.total,
                summary.avg_reward,
                summary.errors,
                summary.retries + sum(self.retrying.values()),
            )
        self.progress.update(
            self.task,
            completed=summary.count,
            rate=(summary.count - (self.first or 0)) / elapsed,
            reward=summary.avg_reward,
            errors=summary.errors,
            retries=summary.retries + sum(self.retrying.values()),
        )


def summary_table(metadata: GenerateMetadata, wall_seconds: float, new_rollouts: int) -> Table:
    """The end-of-run table: reward, metrics, pass@k, errors, tokens and timing."""
    meta: dict[str, Any] = dict(metadata)
    count = meta.get("num_rollouts", 0)
    table = Table(
        title=f"v1 eval: {meta['env_id']} x {meta['model']}: {count} rollouts "
        f"({meta['num_examples']} examples x {meta['rollouts_per_example']})",
        title_justify="left",
    )
    table.add_column("", style="bold")
    table.add_column("value")
    table.add_row("reward (mean)", f"{meta['avg_reward']:.4f}")
    for name, value in meta["avg_metrics"].items():
        table.add_row(f"  {name}", f"{value:.4f}")
    pass_at = "  ".join(f"@{k} {v:.3f}" for k, v in meta["pass_at_k"].items())
    pass_all = "  ".join(f"@{k} {v:.3f}" for k, v in meta["pass_all_k"].items())
    table.add_row(f"pass (reward >= {meta['pass_threshold']:g})", pass_at)
    table.add_row("pass-all", pass_all)
    errors = f"{meta['num_errors']} ({meta['avg_error']:.1%})"
    if meta["error_types"]:
        errors += "  " + ", ".join(f"{name} {n}" for name, n in meta["error_types"].items())
    table.add_row("errors", errors)
    table.add_row("retries", str(meta["num_retries"]))
    table.add_row("stop conditions", ", ".join(f"{name} {n}" for name, n in meta["stop_conditions"].items()))
    usage, total = meta.get("usage") or {}, meta.get("total_usage") or {}
    if usage:
        table.add_row(
            "tokens in / out",
            f"{usage.get('input_tokens', 0):.1f} / {usage.get('output_tokens', 0):.1f} per rollout"
            f"  ({total.get('input_tokens', 0):.0f} / {total.get('output_tokens', 0):.0f} total)",
        )
    timing = meta.get("avg_timing") or {}
    table.add_row(
        "time",
        f"{wall_seconds:.1f} s wall, {new_rollouts / max(wall_seconds, 1e-9):.1f} rollouts/s; "
        f"rollout {timing.get('total', 0) * 1000:.0f} ms, model {timing.get('model', 0) * 1000:.0f} ms (mean)",
    )
    scoring = meta.get("scoring") or {}
    table.add_row(
        "scoring", scoring.get("note") or f"groups of {meta['rollouts_per_example']}; advantage: {scoring.get('advantage')}"
    )
    return table


__all__ = ["LiveView", "summary_table"]
