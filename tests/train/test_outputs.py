"""The run folder: metrics log cut back to the checkpoint on resume, latest finished checkpoint, the PNG plot."""

from __future__ import annotations

import math
from pathlib import Path

from v1.train._outputs import MetricsLog, checkpoint_dir, latest_checkpoint, plot_metrics, read_metrics, write_json


def test_resume_cuts_the_metrics_log_back_to_the_checkpoint(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        log.write({"step": step, "reward": step / 10, "loss": -step})
    resumed = MetricsLog(tmp_path / "metrics.jsonl", keep_lines=2)  # the checkpoint had seen two lines
    resumed.write({"step": 3, "reward": 0.5, "loss": 0.0})
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]
    assert read_metrics(tmp_path / "metrics.jsonl")[-1]["reward"] == 0.5
    png = plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "plot.png", {"eval_before": 0.1, "eval_after": None})
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_nan_metric_a_step_wrote_reads_back_and_plots(tmp_path: Path) -> None:
    """`MetricsLog` writes what a step measured, NaN included (the mean of nothing): the end-of-run summary reads it."""
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write({"step": 1, "reward": 0.5, "loss": float("nan")})
    (row,) = read_metrics(tmp_path / "metrics.jsonl")
    assert row["reward"] == 0.5 and math.isnan(row["loss"])
    assert plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_latest_checkpoint_skips_unfinished_ones(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 10):
        folder = checkpoint_dir(tmp_path, step)
        folder.mkdir(parents=True)
        write_json(folder / "run.json", {"step": step})
    checkpoint_dir(tmp_path, 12).mkdir()  # interrupted while saving: no run.json
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 10)
