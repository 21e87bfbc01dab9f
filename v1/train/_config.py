"""`TrainConfig`: one TOML file describes a training run (``v1 train CONFIG.toml``, ``v1 sft CONFIG.toml``).

Sections: ``[model]``, ``[env]``, ``[inference]``, ``[rollouts]``, ``[loss]``, ``[optim]``,
``[eval]``, ``[sft]``, ``[wandb]``, ``[tensorboard]``, ``[distributed]`` and the run's own fields at the top level. Unknown fields
fail with their path, like every v1 config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from v1.config import ClientConfig, Config, TinyModelConfig
from v1.errors import ConfigError
from v1.train._losses import LossConfig
from v1.types import ClientType


class LoraSection(Config):
    """LoRA adapters (`peft`, the ``lora`` extra): only they train; the base weights stay frozen.

    Args:
        r: the adapters' rank.
        alpha: their scale is ``alpha / r``.
        dropout: dropout on the adapters' input.
        target_modules: module names to adapt, or ``all-linear`` (every linear layer but the output head).
    """

    r: int = Field(8, ge=1)
    alpha: int = Field(16, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | str = "all-linear"


class ModelConfig(Config):
    """The policy: a local transformers model folder, or a tiny one built from a config.

    Args:
        path: a folder written by ``save_pretrained`` (model + tokenizer); nothing is downloaded.
        tiny: build a tiny model and tokenizer locally instead (``v1.inference`` arguments).
        dtype: ``auto`` is bfloat16 on a GPU that supports it, else float32.
        attn_implementation: ``auto`` picks ``flash_attention_2`` when flash-attn is installed, a GPU is used and the
            forward passes are bf16/fp16 (flash-attn takes nothing else), else ``sdpa``; flash-attn with float32 is refused.
        gradient_checkpointing: recompute activations in the backward pass (less memory).
        device: ``auto`` (cuda when available, else cpu), or a torch device string.
        lora: train LoRA adapters instead of every weight (`LoraSection`); absent: full fine-tuning.
    """

    path: str | None = None
    tiny: dict[str, Any] | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: str = "auto"
    gradient_checkpointing: bool = False
    device: str = "auto"
    lora: LoraSection | None = None

    @field_validator("tiny")
    @classmethod
    def _tiny_within_bounds(cls, tiny: dict[str, Any] | None) -> dict[str, Any] | None:
        """The tiny model's shape is checked with the config, before anything is built."""
        if tiny is not None:
            try:
                TinyModelConfig.model_validate(tiny)
            except ValidationError as exc:
                problem = exc.errors()[0]
                field = ".".join(str(part) for part in problem["loc"])
                message = problem["msg"].removeprefix("Value error, ")
                raise PydanticCustomError(
                    "tiny_model", "{message}", {"message": f"{field}: {message}" if field else message}
                ) from None
        return tiny


class EnvSection(Config):
    """Which environment: a module / environment id or a TOML file, with optional overrides."""

    id: str
    taskset: dict[str, Any] = Field(default_factory=dict)
    harness: dict[str, Any] = Field(default_factory=dict)


class InferenceConfig(Config):
    """Where rollouts are generated and how new weights reach the server.

    Args:
        base_url: an OpenAI-compatible server (``v1 serve``, ``vllm serve``); None runs the
            built-in inference server in this process.
        model_name: the model name sent in requests.
        client_type: the client for rollouts; it must return token ids and logprobs.
        weight_sync: ``in_process`` (built-in server here), ``http`` (``POST /update_weights``
            with a checkpoint folder: ``v1 serve``), ``vllm`` (vLLM's collective RPC reload of a
            checkpoint folder, then a prefix-cache reset; verified on CPU),
            ``vllm_nccl``: an NCCL broadcast to vLLM's workers (GPU; written for vLLM 0.32.0, not yet run).
        max_batch_size: the built-in server's batch size; None: `rollouts.max_concurrent`, so every
            rollout in flight decodes in the same step (a round of 16 x 8 is one batch, as in TRL).
        engine: without `base_url`, what serves the rollouts: ``builtin`` (this process) or
            ``vllm`` (a vLLM server this run starts and stops; needs ``weight_sync = "vllm"`` or ``"vllm_nccl"``).
        vllm_args: more ``vllm serve`` arguments for the server the run starts.
        vllm_startup_timeout: seconds vLLM may take to answer (it compiles at start-up).
        gpus: on a GPU machine, the GPUs (indices among those this machine shows) the vLLM this run
            starts runs on, tensor-parallel over several; None: the first GPU after the trainer
            ranks' (rank i trains on GPU i), so vLLM never shares a GPU with a trainer rank and its
            ``--gpu-memory-utilization`` is of a GPU of its own.
        nccl_master_address, nccl_master_port, nccl_dtype: ``vllm_nccl``'s rendezvous (reachable by
            vLLM's workers) and wire dtype.
    """

    base_url: str | None = None
    model_name: str = "policy"
    client_type: ClientType = "openai_chat_completions"
    weight_sync: Literal["in_process", "http", "vllm", "vllm_nccl"] = "in_process"
    max_batch_size: int | None = Field(None, ge=1)
    engine: Literal["builtin", "vllm"] = "builtin"
    vllm_args: list[str] = Field(default_factory=list)
    vllm_startup_timeout: float = Field(1200.0, gt=0)
    gpus: list[int] | None = None
    nccl_master_address: str = "127.0.0.1"
    nccl_master_port: int = Field(29600, ge=1, le=65535)
    nccl_dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"

    @model_validator(mode="after")
    def _engine_and_sync_agree(self) -> InferenceConfig:
        if self.engine == "vllm" and self.weight_sync not in ("vllm", "vllm_nccl"):
            raise ValueError(f'engine = "vllm" pushes weights with weight_sync = "vllm" or "vllm_nccl", not {self.weight_sync!r}')
        return self

    def client_config(self, base_url: str) -> ClientConfig:
        return ClientConfig(
            client_type=self.client_type, api_base_url=base_url, api_key_var="V1_INFERENCE_API_KEY", max_retries=2
        )


class RolloutsConfig(Config):
    """How rollouts are produced (the orchestrator).

    Args:
        examples_per_step: groups (examples) each optimizer step trains on.
        rollouts_per_example: rollouts per group; advantages are relative within a group.
        max_staleness: rollouts may be generated by weights up to this many steps old; older
            ones are dropped (and counted). 0 is on-policy; k lets generation run k steps ahead.
        max_concurrent: rollouts in flight.
        sampling_args: sampling args of training rollouts (the harness's are merged under them).
        filter_zero_variance: drop groups whose rewards are all equal (no gradient), counted.
        max_zero_variance_in_a_row: with `filter_zero_variance`, stop the run (`ZeroVarianceError`)
            once this many groups in a row had all rewards equal: nothing left to learn from (1,024
            groups: 8,192 rollouts at 8 per group; the tiny recipe, near its best, saw 130 in a row). 0: never stop.
        max_errored_in_a_row: stop the run (`RolloutsFailedError`, naming the last error) once this many
            groups in a row had a rollout that errored (such groups are filtered): a broken model server
            or environment ends the run instead of sampling forever. 0: never stop.
        max_groups_per_step: once this many groups finished while a step's batch is collected
            (filtered ones included), the step trains on the groups it has (at least one) instead
            of generating on: a policy that answers most groups all right or all wrong can't stall
            a step. ``groups_trained`` and ``filtered_zero_variance`` count what happened. None: no cap.
        seed: the data order's seed (epoch e shuffles the rows with seed + e).
    """

    examples_per_step: int = Field(8, ge=1)
    rollouts_per_example: int = Field(8, ge=1)
    max_staleness: int = Field(1, ge=0)
    max_concurrent: int = Field(64, ge=1)
    sampling_args: dict[str, Any] = Field(default_factory=lambda: {"temperature": 1.0, "max_tokens": 64})
    filter_zero_variance: bool = True
    max_zero_variance_in_a_row: int = Field(1024, ge=0)
    max_errored_in_a_row: int = Field(64, ge=0)
    max_groups_per_step: int | None = Field(None, ge=1)
    seed: int = 0


Beta = Annotated[float, Field(ge=0, lt=1)]
"""An AdamW beta: a running average's decay, in [0, 1)."""


class OptimConfig(Config):
    """AdamW, gradient clipping and the learning-rate schedule (warmup, then constant / linear / cosine decay).

    Args:
        updates_per_step: optimizer updates on each step's samples (GRPO's iterations per batch):
            more learning per generated rollout, the clipped ratio keeping each update near the
            policy that generated them. The schedule counts steps.
    """

    lr: float = Field(1e-5, gt=0, allow_inf_nan=False)
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)
    betas: tuple[Beta, Beta] = (0.9, 0.999)
    max_grad_norm: float = Field(1.0, gt=0, allow_inf_nan=False)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    updates_per_step: int = Field(1, ge=1)


class EvalSection(Config):
    """Held-out evaluation before and after training (and every `every` steps when > 0)."""

    num_examples: int = -1
    rollouts_per_example: int = Field(1, ge=1)
    sampling_args: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0.0, "max_tokens": 64})
    at_start: bool = True
    at_end: bool = True
    every: int = Field(0, ge=0)


class SFTSection(Config):
    """Supervised fine-tuning (``v1 sft``, or a warm-up before RL when `warmup` is true).

    Args:
        data: ``answers`` (the taskset's reference answers, rendered with the chat template), or a
            ``results.jsonl`` of saved rollouts (their recorded tokens, never retokenized).
        min_reward: with saved rollouts, keep only those with at least this reward.
        steps, batch_size, lr: the SFT run.
        warmup: run SFT before RL in ``v1 train``.
    """

    data: str = "answers"
    min_reward: float | None = None
    steps: int = Field(50, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0, allow_inf_nan=False)
    warmup: bool = False

    def optim(self, rl: OptimConfig) -> OptimConfig:
        """The SFT run's optimizer: RL's AdamW settings at `lr`, constant (no RL warm-up or decay), one update per step."""
        return rl.model_copy(update={"lr": self.lr, "warmup_steps": 0, "schedule": "constant", "updates_per_step": 1})


class WandbConfig(Config):
    """Weights & Biases logging (the `wandb` package is imported only when enabled)."""

    enabled: bool = False
    project: str = "v1"
    name: str | None = None
    mode: Literal["online", "offline", "disabled"] = "online"


class TensorBoardConfig(Config):
    """TensorBoard logging: every numeric metric of each step as a scalar (the `tensorboard` extra; imported only when enabled).

    Args:
        log_dir: where the event files go; None: ``output_dir/tensorboard``.
    """

    enabled: bool = False
    log_dir: str | None = None


class DistributedConfig(Config):
    """Several training processes under ``torchrun`` (read only when torchrun's environment is set).

    Args:
        backend: ``auto`` is nccl on CUDA and gloo on CPU; ``nccl`` needs CUDA GPUs.
        timeout_s: how long a collective may wait: the ranks other than 0 wait while rank 0
            generates rollouts and evaluates, so this bounds a step's generation and an eval.
    """

    backend: Literal["auto", "nccl", "gloo"] = "auto"
    timeout_s: float = Field(3600.0, gt=0)


class RaySection(Config):
    """Rollout groups on Ray actors (`v1.env.RayExecutor`) instead of this process's event loop.

    Each group runs on an actor and takes the next endpoint of the inference client. The actors
    reach the inference server by its URL: on a cluster of several machines, serve the policy
    where the nodes can reach it (`inference.base_url`), not on this machine's loopback.

    Args:
        address: the cluster's address (``auto``, ``host:6379``, ``ray://host:10001``), or
            ``local`` for a Ray instance this process starts (and stops).
        actors: how many actors.
        actor_concurrency: the most rollouts in flight per actor; None: no limit beyond
            `rollouts.max_concurrent`.
        num_cpus: the CPUs Ray reserves per actor (fractions allowed).
    """

    address: str = "local"
    actors: int = Field(2, ge=1)
    actor_concurrency: int | None = Field(None, ge=1)
    num_cpus: float = Field(1.0, gt=0)


class TrainConfig(Config):
    """A training run.

    Args:
        output_dir: checkpoints, ``metrics.jsonl``, ``plot.png`` and eval results go here.
        max_steps: optimizer steps of RL.
        micro_batch_size: samples per forward/backward (gradient accumulation over the step).
        micro_batch_tokens: instead, pack samples into rows of at most this many tokens (one row
            per forward/backward; attention stays within each sample): memory follows tokens,
            not samples, and no padding is computed.
        share_prefixes: in each padded micro-batch, run the tokens its samples share before their
            first trained prediction (a group's prompt) once, not once per sample: the same
            log-probabilities and gradients for less compute (a model that cannot, e.g. with
            gradient checkpointing or a sliding-window cache, runs its own forward). Not with
            `micro_batch_tokens`.
        max_seq_len: samples are cut to this many tokens (counted).
        checkpoint_every: save every this many steps (and always at the end); 0: only at the end.
        seed: torch's seed.
        ray: run the rollout groups on Ray actors (`RaySection`); absent: on this process's loop.
    """

    model: ModelConfig
    env: EnvSection
    inference: InferenceConfig
    rollouts: RolloutsConfig
    loss: LossConfig
    optim: OptimConfig
    eval: EvalSection
    sft: SFTSection
    wandb: WandbConfig
    tensorboard: TensorBoardConfig
    distributed: DistributedConfig
    ray: RaySection | None = None
    output_dir: str = "outputs/train"
    max_steps: int = Field(100, ge=0)
    micro_batch_size: int = Field(16, ge=1)
    micro_batch_tokens: int | None = Field(None, ge=1)
    share_prefixes: bool = True
    max_seq_len: int | None = Field(None, ge=1)
    checkpoint_every: int = Field(0, ge=0)
    seed: int = 0

    @model_validator(mode="after")
    def _lora_where_supported(self) -> TrainConfig:
        if self.model.lora is not None and self.inference.weight_sync in ("vllm", "vllm_nccl"):
            raise ValueError(
                "model.lora with vLLM is not supported yet: it would push merged full weights every step, "
                "where vLLM's LoRA adapters are the right way; use the built-in engine or v1 serve"
            )
        return self

    def for_sft(self) -> TrainConfig:
        """This run's SFT (``v1 sft``, or the warm-up before RL) as a run of its own: the ``sft`` objective,
        `sft`'s optimizer (`SFTSection.optim`) and `sft.steps` steps; the model and micro-batching as they are."""
        return self.model_copy(
            update={"loss": LossConfig(kind="sft"), "optim": self.sft.optim(self.optim), "max_steps": self.sft.steps}
        )

    def check_output_dir(self) -> Path:
        """`output_dir`, checked without writing anything (``v1 train`` checks it before importing torch).

        Raises:
            ConfigError: one line when a file is in its place.
        """
        output_dir = Path(self.output_dir)
        if output_dir.exists() and not output_dir.is_dir():
            raise ConfigError(f"output_dir {output_dir}: is a file, not a folder; name a folder (it is created if missing)")
        return output_dir

    def make_output_dir(self) -> Path:
        """`output_dir`, created if missing.

        Raises:
            ConfigError: one line when it can't be a folder (a file is there, no permission).
        """
        output_dir = self.check_output_dir()
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"output_dir {output_dir}: cannot create the folder: {exc.strerror or exc}") from None
        return output_dir

    @classmethod
    def load(cls, path: str | Path) -> TrainConfig:
        """From a TOML file; a relative `output_dir` stays relative to the working directory."""
        return cls.from_toml(path)

    def to_toml(self) -> str:
        """This config as TOML that `load` reads back equal: top-level fields, then one table per section."""
        data = self.model_dump(mode="json", exclude_none=True)
        lines = [f"{key} = {_toml_value(value)}" for key, value in data.items() if not isinstance(value, dict)]
        for section, fields in data.items():
            if isinstance(fields, dict):
                lines += [f"[{section}]", *(f"{key} = {_toml_value(value)}" for key, value in fields.items())]
        return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    """A JSON-mode value as TOML: inline tables, arrays, booleans; numbers and strings as JSON writes them,
    which TOML reads alike (characters left as they are, but DEL, which TOML wants escaped)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_value(str(key))} = {_toml_value(item)}" for key, item in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


__all__ = [
    "DistributedConfig",
    "EnvSection",
    "EvalSection",
    "InferenceConfig",
    "LoraSection",
    "ModelConfig",
    "OptimConfig",
    "RaySection",
    "RolloutsConfig",
    "SFTSection",
    "TensorBoardConfig",
    "TrainConfig",
    "WandbConfig",
]
