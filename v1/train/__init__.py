"""The trainer: RL (GRPO-family losses) and SFT on the token trajectories that rollouts record.

Importing `v1` never imports this package (it needs the ``[train]`` extra: torch, transformers). Importing
this package does not import torch either: `TrainConfig` and its sections are plain configs, and every other
name loads its module (and torch) on first use.
"""

from typing import TYPE_CHECKING

from v1._util.lazy import lazy_attributes
from v1.train._config import DistributedConfig, ModelConfig, OptimConfig, TrainConfig

if TYPE_CHECKING:
    from v1.train._batch import Sample, samples_from_state
    from v1.train._losses import LossConfig, policy_loss
    from v1.train._model import load_policy
    from v1.train._orchestrator import Orchestrator
    from v1.train._preflight import check_before_loading
    from v1.train._ranks import under_torchrun
    from v1.train._rl_trainer import RLConfig, RLTrainer, TrainerCallback
    from v1.train._run import run_sft, train
    from v1.train._shards import export_checkpoint
    from v1.train._trainer import PolicyTrainer

__getattr__ = lazy_attributes(
    __name__,
    {
        **dict.fromkeys(["Sample", "samples_from_state"], "v1.train._batch"),
        **dict.fromkeys(["LossConfig", "policy_loss"], "v1.train._losses"),
        "load_policy": "v1.train._model",
        "Orchestrator": "v1.train._orchestrator",
        "check_before_loading": "v1.train._preflight",
        "under_torchrun": "v1.train._ranks",
        **dict.fromkeys(["RLConfig", "RLTrainer", "TrainerCallback"], "v1.train._rl_trainer"),
        **dict.fromkeys(["run_sft", "train"], "v1.train._run"),
        "export_checkpoint": "v1.train._shards",
        "PolicyTrainer": "v1.train._trainer",
    },
)

__all__ = [
    "DistributedConfig",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "Orchestrator",
    "PolicyTrainer",
    "RLConfig",
    "RLTrainer",
    "Sample",
    "TrainConfig",
    "TrainerCallback",
    "check_before_loading",
    "export_checkpoint",
    "load_policy",
    "policy_loss",
    "run_sft",
    "samples_from_state",
    "train",
    "under_torchrun",
]
