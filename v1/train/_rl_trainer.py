"""`RLTrainer` and `RLConfig`: the Python face of ``v1 train``, shaped like TRL's ``GRPOTrainer(model=..., args=GRPOConfig(...))``.

Not a second trainer: `RLConfig` maps onto a `TrainConfig` (`RLConfig.to_train_config`) and
`RLTrainer.train` runs it through `v1.train.train`, the function ``v1 train CONFIG.toml`` calls, so a
run from Python and the same run from TOML are the same run (outputs, checkpoints, ``metrics.jsonl``).
Importing this module does not import torch; training does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from v1.config import Config, TinyModelConfig
from v1.errors import ConfigError
from v1.train._config import Beta, ModelConfig, TrainConfig
from v1.train._losses import ImportanceSamplingLevel, RewardScaling

if TYPE_CHECKING:
    from v1.env import Env
    from v1.train._run import TrainResult


class RLConfig(Config):
    """A training run's settings, named after TRL's ``GRPOConfig`` where it has the same knob (docs/training.md maps them).

    Each field is one `TrainConfig` field (the TOML path in brackets); the defaults are `TrainConfig`'s.

    Args:
        output_dir: checkpoints, ``metrics.jsonl``, ``plot.png``, ``summary.json`` (``output_dir``).
        max_steps: RL optimizer steps (``max_steps``).
        seed: torch's seed and the data order's (``seed``, ``rollouts.seed``).
        learning_rate, lr_scheduler_type, warmup_steps, weight_decay, adam_beta1, adam_beta2,
            max_grad_norm: AdamW and its schedule (``optim.*``).
        num_iterations: optimizer updates on each step's rollouts (``optim.updates_per_step``).
        prompts_per_step: groups (prompts) per step (``rollouts.examples_per_step``).
        num_generations: rollouts per prompt (``rollouts.rollouts_per_example``).
        max_completion_length, temperature, top_p: the training rollouts' sampling (``rollouts.sampling_args``).
        max_staleness, max_concurrent, max_groups_per_step, filter_zero_variance: ``rollouts.*``.
        loss_type: ``grpo``, ``dapo`` or ``cispo`` (``loss.kind``).
        beta: the KL coefficient (``loss.kl_coef``).
        epsilon, epsilon_high: the ratio's clip (``loss.clip_low``, ``loss.clip_high``; None: the kind's own).
        scale_rewards, importance_sampling_level, mask_truncated_completions: ``loss.*``.
        micro_batch_size, max_seq_len: samples per forward/backward, and the cut (``micro_batch_size``, ``max_seq_len``).
        gradient_checkpointing, dtype, device: ``model.*``.
        eval_examples, eval_temperature, eval_max_completion_length, eval_steps, eval_on_start, eval_on_end:
            the held-out eval (``eval.num_examples``, ``eval.sampling_args``, ``eval.every``, ``eval.at_start``, ``eval.at_end``).
        sft_warmup_steps: SFT steps on the reference answers before RL (``sft.warmup``, ``sft.steps``); 0: none.
        sft_learning_rate, sft_batch_size: the warm-up's (``sft.lr``, ``sft.batch_size``).
        save_steps: checkpoint every this many steps, and at the end (``checkpoint_every``; 0: only at the end).
        report_to: ``wandb`` and/or ``tensorboard`` (``wandb.enabled``, ``tensorboard.enabled``).
        model_name: the model name rollouts request (``inference.model_name``).
    """

    output_dir: str = "outputs/train"
    max_steps: int = Field(100, ge=0)
    seed: int = 0
    learning_rate: float = Field(1e-5, gt=0, allow_inf_nan=False)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)
    adam_beta1: Beta = 0.9
    adam_beta2: Beta = 0.999
    max_grad_norm: float = Field(1.0, gt=0, allow_inf_nan=False)
    num_iterations: int = Field(1, ge=1)
    prompts_per_step: int = Field(8, ge=1)
    num_generations: int = Field(8, ge=1)
    max_completion_length: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1)
    max_staleness: int = Field(1, ge=0)
    max_concurrent: int = Field(64, ge=1)
    max_groups_per_step: int | None = Field(None, ge=1)
    filter_zero_variance: bool = True
    loss_type: Literal["grpo", "dapo", "cispo"] = "grpo"
    beta: float = Field(0.0, ge=0, allow_inf_nan=False)
    epsilon: float = Field(0.2, ge=0, le=1)
    epsilon_high: float | None = Field(None, ge=0)
    scale_rewards: RewardScaling = "none"
    importance_sampling_level: ImportanceSamplingLevel = "token"
    mask_truncated_completions: bool = False
    micro_batch_size: int = Field(16, ge=1)
    max_seq_len: int | None = Field(None, ge=1)
    gradient_checkpointing: bool = False
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"
    eval_examples: int = Field(-1, ge=-1)
    eval_temperature: float = Field(0.0, ge=0, allow_inf_nan=False)
    eval_max_completion_length: int = Field(64, ge=1)
    eval_steps: int = Field(0, ge=0)
    eval_on_start: bool = True
    eval_on_end: bool = True
    sft_warmup_steps: int = Field(0, ge=0)
    sft_learning_rate: float = Field(1e-3, gt=0, allow_inf_nan=False)
    sft_batch_size: int = Field(16, ge=1)
    save_steps: int = Field(0, ge=0)
    report_to: list[Literal["wandb", "tensorboard"]] = Field(default_factory=list)
    model_name: str = "policy"

    def to_train_config(self, model: ModelConfig, env_id: str) -> TrainConfig:
        """The `TrainConfig` this is: what ``v1 train`` would run from the equivalent TOML."""
        sampling = {"temperature": self.temperature, "max_tokens": self.max_completion_length}
        if self.top_p != 1.0:
            sampling["top_p"] = self.top_p
        return TrainConfig(
            model=model,
            env={"id": env_id},
            inference={"model_name": self.model_name},
            rollouts={
                "examples_per_step": self.prompts_per_step,
                "rollouts_per_example": self.num_generations,
                "max_staleness": self.max_staleness,
                "max_concurrent": self.max_concurrent,
                "max_groups_per_step": self.max_groups_per_step,
                "filter_zero_variance": self.filter_zero_variance,
                "sampling_args": sampling,
                "seed": self.seed,
            },
            loss={
                "kind": self.loss_type,
                "kl_coef": self.beta,
                "clip_low": self.epsilon,
                "clip_high": self.epsilon_high,
                "scale_rewards": self.scale_rewards,
                "importance_sampling_level": self.importance_sampling_level,
                "mask_truncated_completions": self.mask_truncated_completions,
            },
            optim={
                "lr": self.learning_rate,
                "schedule": self.lr_scheduler_type,
                "warmup_steps": self.warmup_steps,
                "weight_decay": self.weight_decay,
                "betas": (self.adam_beta1, self.adam_beta2),
                "max_grad_norm": self.max_grad_norm,
                "updates_per_step": self.num_iterations,
            },
            eval={
                "num_examples": self.eval_examples,
                "sampling_args": {"temperature": self.eval_temperature, "max_tokens": self.eval_max_completion_length},
                "at_start": self.eval_on_start,
                "at_end": self.eval_on_end,
                "every": self.eval_steps,
            },
            sft={
                "warmup": self.sft_warmup_steps > 0,
                "steps": max(1, self.sft_warmup_steps),
                "lr": self.sft_learning_rate,
                "batch_size": self.sft_batch_size,
            },
            wandb={"enabled": "wandb" in self.report_to},
            tensorboard={"enabled": "tensorboard" in self.report_to},
            output_dir=self.output_dir,
            max_steps=self.max_steps,
            micro_batch_size=self.micro_batch_size,
            max_seq_len=self.max_seq_len,
            checkpoint_every=self.save_steps,
            seed=self.seed,
        )


class TrainerCallback:
    """Hooks `RLTrainer` calls; override the ones you need (each does nothing by default)."""

    def on_train_begin(self, config: TrainConfig) -> None:
        """Before the run starts, with the `TrainConfig` it runs."""

    def on_log(self, metrics: dict[str, Any]) -> None:
        """After each RL step, with its ``metrics.jsonl`` line (``step``, ``reward``, ``loss``, ``step_time_s``, ...)."""

    def on_evaluate(self, reward: float) -> None:
        """After `RLTrainer.evaluate`, with the held-out mean reward."""

    def on_train_end(self, result: TrainResult) -> None:
        """After the run, with what it did (held-out rewards before and after, steps, wall time)."""


class _LogFunction(TrainerCallback):
    """A plain function as a callback: called with each step's metrics."""

    def __init__(self, function: Callable[[dict[str, Any]], Any]) -> None:
        self.function = function

    def on_log(self, metrics: dict[str, Any]) -> None:
        self.function(metrics)


ModelArg = str | Path | dict[str, Any] | TinyModelConfig | ModelConfig
"""What `RLTrainer` takes as `model`: a local model folder, a tiny model's config, or a whole ``[model]`` section."""


def model_section(model: ModelArg, args: RLConfig) -> ModelConfig:
    """The ``[model]`` section `model` stands for, with `args`' dtype, device and gradient checkpointing.

    Raises:
        ConfigError: `model` is none of the accepted kinds, or a tiny config out of bounds.
    """
    knobs = {"dtype": args.dtype, "device": args.device, "gradient_checkpointing": args.gradient_checkpointing}
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, str | Path):
        return ModelConfig(path=str(model), **knobs)
    if isinstance(model, TinyModelConfig):
        return ModelConfig(tiny=model.model_dump(), **knobs)
    if isinstance(model, dict):
        return ModelConfig(tiny=model, **knobs)
    raise ConfigError(
        f"RLTrainer: model must be a model folder, a tiny model's config (dict or TinyModelConfig) or a ModelConfig, "
        f"not {type(model).__name__}"
    )


class RLTrainer:
    """RL-train `model` on `env` as `args` says: ``RLTrainer(model=..., env=..., args=RLConfig(...)).train()``.

    The run is ``v1 train``'s (`v1.train.train` on `RLConfig.to_train_config`): the built-in inference
    server in this process, the environment's rollouts, GRPO-family losses, checkpoints and
    ``metrics.jsonl`` in ``args.output_dir``.

    Args:
        model: a local model folder (``save_pretrained``; nothing is downloaded), a tiny model's config
            (a dict or `TinyModelConfig`), or a `ModelConfig` (``[model]``, e.g. with LoRA).
        env: an `Env` (`v1.load_environment`) or an environment id / TOML path.
        args: the run's settings; default `RLConfig()`.
        callbacks: `TrainerCallback` objects, or functions called with each step's metrics.

    Raises:
        ConfigError: one line for a model or env of the wrong kind, or settings that don't validate.
    """

    def __init__(
        self,
        model: ModelArg,
        env: Env | str | Path,
        args: RLConfig | None = None,
        callbacks: Sequence[TrainerCallback | Callable[[dict[str, Any]], Any]] = (),
    ) -> None:
        from v1.env import Env, load_environment

        self.args = args if args is not None else RLConfig()
        if not isinstance(self.args, RLConfig):
            raise ConfigError(f"RLTrainer: args must be an RLConfig, not {type(self.args).__name__}")
        if isinstance(env, str | Path):
            env = load_environment(env)
        if not isinstance(env, Env):
            raise ConfigError(
                f"RLTrainer: env must be an Env (v1.load_environment) or an environment id, not {type(env).__name__}"
            )
        self.env = env
        self.config = self.args.to_train_config(model_section(model, self.args), env.env_id)
        self.callbacks = [item if isinstance(item, TrainerCallback) else _LogFunction(item) for item in callbacks]
        self.result: TrainResult | None = None
        self._policy: tuple[Any, Any] | None = None

    def train(self, resume: bool = False) -> TrainResult:
        """Run the training (`train_async` on a new event loop); what it did.

        Args:
            resume: continue from the latest checkpoint in ``output_dir``.

        Raises:
            ConfigError: called where an event loop is running (await `train_async` there).
        """
        return _run_sync(self.train_async(resume), "train")

    async def train_async(self, resume: bool = False) -> TrainResult:
        """`train` for a running event loop."""
        from v1.train._run import train

        for callback in self.callbacks:
            callback.on_train_begin(self.config)
        self.result = await train(self.config, resume=resume, on_step=self._on_step, env=self.env)
        self._policy = (self.result.model, self.result.tokenizer)
        for callback in self.callbacks:
            callback.on_train_end(self.result)
        return self.result

    def evaluate(self) -> float:
        """The held-out mean reward (``args.eval_*``) of the trained policy (before `train`: of the initial one),
        served by the same inference endpoint a run uses."""
        return _run_sync(self.evaluate_async(), "evaluate")

    async def evaluate_async(self) -> float:
        """`evaluate` for a running event loop."""
        from v1.train._lora import inference_copy
        from v1.train._run import evaluate, inference_endpoint

        model, tokenizer = self.policy()
        output_dir = self.config.make_output_dir()
        async with inference_endpoint(self.config, inference_copy(model).eval(), tokenizer, output_dir) as (url, _):
            reward = await evaluate(self.env, self.config, self.config.inference.client_config(url))
        for callback in self.callbacks:
            callback.on_evaluate(reward)
        return reward

    def save_model(self, path: str | Path) -> Path:
        """The policy (trained, or the initial one before `train`) and its tokenizer as a ``save_pretrained``
        folder at `path` (with LoRA: the adapter); ``from_pretrained(path)`` loads it.

        Raises:
            ConfigError: `path` is a file, or the trained model is sharded across torchrun ranks.
        """
        from v1.train._ranks import under_torchrun

        if under_torchrun():
            raise ConfigError("RLTrainer.save_model: under torchrun each rank holds a shard; use the run's checkpoints")
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"RLTrainer.save_model: {folder} is a file, not a folder")
        model, tokenizer = self.policy()
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    def policy(self) -> tuple[Any, Any]:
        """The model and tokenizer: the trained ones after `train`, else the initial ones (loaded once)."""
        if self._policy is None:
            from v1.train._model import load_policy

            model, tokenizer, _ = load_policy(self.config.model)
            self._policy = (model, tokenizer)
        return self._policy

    def _on_step(self, metrics: dict[str, Any]) -> None:
        for callback in self.callbacks:
            callback.on_log(metrics)


def _run_sync(work: Any, name: str) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    work.close()
    raise ConfigError(f"RLTrainer.{name}: an event loop is running here; await RLTrainer.{name}_async() instead")


__all__ = ["RLConfig", "RLTrainer", "TrainerCallback", "model_section"]
