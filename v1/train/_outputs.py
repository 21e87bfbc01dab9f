"""What a training run leaves in its output folder: checkpoints, ``metrics.jsonl``, ``plot.png``, ``summary.json``.

output_dir/
  checkpoints/step_N/model/      save_pretrained weights + tokenizer (loadable by `v1 serve`)
  checkpoints/step_N/trainer.pt  optimizer and schedule state
  checkpoints/step_N/run.json    step, data-order position, pending examples, metrics line count
  metrics.jsonl                  one JSON object per step
  plot.png                       reward and loss over steps
  summary.json                   held-out eval before/after, wall time, memory
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from v1._util import bounded_json as _bounded_json

CHECKPOINT = re.compile(r"^step_(\d+)$")


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return output_dir / "checkpoints" / f"step_{step}"


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The checkpoint with the highest step that finished saving (has ``run.json``), or None."""
    folder = output_dir / "checkpoints"
    if not folder.is_dir():
        return None
    found = [
        (int(match.group(1)), path)
        for path in folder.iterdir()
        if (match := CHECKPOINT.match(path.name)) and (path / "run.json").is_file()
    ]
    return max(found)[1] if found else None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write atomically: a reader never sees half a file."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, default=float) + "\n", encoding="utf-8")
    temporary.replace(path)


class MetricsLog:
    """``metrics.jsonl``, one line per step, flushed as written.

    Args:
        path: the file.
        keep_lines: on resume, the lines the checkpoint had seen; later lines (steps the
            checkpoint does not have) are dropped so the log and the checkpoint agree.
    """

    def __init__(self, path: Path, keep_lines: int | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_lines is None:
            path.write_text("", encoding="utf-8")
            self.lines = 0
        else:
            kept = path.read_text(encoding="utf-8").splitlines()[:keep_lines] if path.exists() else []
            path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            self.lines = len(kept)

    def write(self, metrics: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(metrics, default=float) + "\n")
        self.lines += 1


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The steps of a ``metrics.jsonl``, read bounded (a run folder is outside data on ``--resume``).

    Raises:
        UnsafeJSONError: a line that is not JSON or too deep (named by file and line). A metric may be NaN
        (`MetricsLog` writes what a step measured, e.g. the mean of nothing), so non-finite numbers are kept.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        _bounded_json.loads(line, f"{path} line {number}", finite=False) for number, line in enumerate(lines, 1) if line.strip()
    ]


def plot_metrics(metrics_path: Path, png_path: Path, evals: Mapping[str, float | None] | None = None) -> Path:
    """Reward and loss over steps as a PNG (matplotlib, headless); held-out eval rewards as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    steps = [row["step"] for row in rows]
    figure, (reward_axis, loss_axis) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    reward_axis.plot(steps, [row.get("reward", math.nan) for row in rows], label="rollout reward (train)", color="tab:blue")
    if evals:
        for label, (step, color) in {"eval_before": (0, "tab:red"), "eval_after": (max(steps, default=0), "tab:green")}.items():
            value = evals.get(label)
            if value is not None:
                reward_axis.scatter(
                    [step], [value], color=color, zorder=3, label=f"held-out eval {label.split('_')[1]}: {value:.2f}"
                )
    reward_axis.set_ylabel("reward")
    reward_axis.set_ylim(-0.05, 1.05)
    reward_axis.legend(loc="lower right")
    reward_axis.grid(alpha=0.3)
    loss_axis.plot(steps, [row.get("loss", math.nan) for row in rows], color="tab:orange")
    loss_axis.set_ylabel("loss")
    loss_axis.set_xlabel("step")
    loss_axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
    return png_path


__all__ = ["MetricsLog", "checkpoint_dir", "latest_checkpoint", "plot_metrics", "read_metrics", "write_json"]
