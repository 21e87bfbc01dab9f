"""Experiment trackers a run logs each step's metrics to: Weights & Biases and TensorBoard.

Each is imported only when its section is enabled (``[wandb]`` needs the `wandb` extra,
``[tensorboard]`` the `tensorboard` one). Every numeric metric of a step is logged under
its `metrics.jsonl` name, at the step's number.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from v1.train._config import TrainConfig


class Tracker(Protocol):
    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record one step's metrics."""
        ...

    def close(self) -> None:
        """Flush and finish the run."""
        ...


class WandbTracker:
    """A Weights & Biases run with the config attached."""

    def __init__(self, config: TrainConfig) -> None:
        import wandb

        section = config.wandb
        self.run = wandb.init(
            project=section.project, name=section.name, mode=section.mode, config=config.model_dump(mode="json")
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class TensorBoardTracker:
    """Scalars in a TensorBoard event file (`torch.utils.tensorboard`), one per numeric metric."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(name, float(value), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_trackers(config: TrainConfig) -> list[Tracker]:
    """The trackers `config` enables (none by default)."""
    trackers: list[Tracker] = []
    if config.wandb.enabled:
        trackers.append(WandbTracker(config))
    if config.tensorboard.enabled:
        trackers.append(TensorBoardTracker(Path(config.tensorboard.log_dir or Path(config.output_dir) / "tensorboard")))
    return trackers


__all__ = ["TensorBoardTracker", "Tracker", "WandbTracker", "open_trackers"]
