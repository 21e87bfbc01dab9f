"""`v1 train` progress when stdout is not a terminal: whole lines, never cut to 80 columns."""

from __future__ import annotations

import io
from typing import Any

import pytest

pytest.importorskip("torch")

from v1.train._run import Progress


def metrics(step: int) -> dict[str, Any]:
    return {"step": step, "reward": 0.887, "loss": -0.004, "trainer_tokens_per_s": 12874.0, "rollout_tokens_per_s": 628.0,
            "filtered_zero_variance": 62, "dropped_stale": 3, "step_time_s": 1.25}  # fmt: skip


def test_not_a_tty_gives_whole_lines_one_per_step() -> None:
    stream = io.StringIO()
    progress = Progress(True, 3, 0, stream=stream, line_interval_s=0.0)
    progress.message("sft warm-up: 30 steps, loss 2.100 -> 0.300")
    for step in (1, 2, 3):
        progress.update(metrics(step))
    progress.close()
    lines = stream.getvalue().splitlines()
    assert stream.getvalue().endswith("\n") and "\x1b" not in stream.getvalue()
    assert lines[0] == "sft warm-up: 30 steps, loss 2.100 -> 0.300"
    assert [line.split()[2] for line in lines[1:]] == ["1/3", "2/3", "3/3"]
    assert len(lines[3]) > 80 and lines[3].endswith("filtered 62 dropped 3 (1.2 s)")


def test_lines_are_throttled_but_the_last_step_always_shows() -> None:
    stream = io.StringIO()
    progress = Progress(True, 4, 0, stream=stream, line_interval_s=3600.0)
    for step in (1, 2, 3, 4):
        progress.update(metrics(step))
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["1/4", "4/4"]


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(False, 2, 0, stream=stream)
    progress.update(metrics(1))
    progress.message("held-out eval")
    assert stream.getvalue() == ""
