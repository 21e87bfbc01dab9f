"""A training run end to end: `train` (RL, optionally after an SFT warm-up) and `sft`.

RL: the policy is served by the built-in inference server in this process (or any
OpenAI-compatible server at `inference.base_url`); the orchestrator generates groups
through the environment's `run_group` while the trainer steps in a worker thread; after
each step the new weights go to the server and the orchestrator learns the new
version. Held-out evaluation runs through `Env.evaluate` on the same server before
(the checkpoint RL starts from) and after training.

Under ``torchrun`` (``torchrun --nproc-per-node N -m v1.train CONFIG``) the model is sharded
with FSDP2 across the ranks; rank 0 does all of the above and sends every rank its share
of each step's samples (`v1.train`); the others train on their share and wait for
the next command.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import logging
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
from torch.distributed.fsdp import FSDPModule

from v1._util.gc_tuning import freeze_heap, frozen_heap
from v1._util.lifeline import ParentWatch, exit_now, exit_on_sigterm
from v1.config import import_ref
from v1.env import RayExecutor, check_ray_address, load_environment
from v1.errors import ConfigError
from v1.inference import (
    VLLM_CPU_THREADS,
    InferenceServer,
    InProcessWeightSync,
    LogitProcessing,
    WeightSync,
    server_sync,
    vllm_endpoint,
)
from v1.train._batch import Sample, StateSamples, samples_from_states
from v1.train._config import TrainConfig
from v1.train._lora import inference_copy
from v1.train._losses import RewardScaling
from v1.train._model import (
    autocast_dtype,
    copy_weights,
    load_checkpoint_weights,
    load_policy,
    load_sharded_policy,
    resolve_device,
    sharded_skeleton,
)
from v1.train._orchestrator import Orchestrator, StepBatch
from v1.train._outputs import MetricsLog, checkpoint_dir, latest_checkpoint, plot_metrics, read_metrics, write_json
from v1.train._preflight import check_before_loading
from v1.train._ranks import (
    GatherCommand,
    RankGroup,
    RankWorker,
    SaveCommand,
    SaveModelCommand,
    SFTCommand,
    TrainCommand,
    sft_batches,
    share_samples,
    under_torchrun,
)
from v1.train._sft import samples_from_answers, samples_from_results
from v1.train._shards import is_sharded_checkpoint
from v1.train._trackers import Tracker, open_trackers
from v1.train._trainer import PolicyTrainer, current_rss_mb

logger = logging.getLogger(__name__)

TOKEN_SAMPLING_ARGS = {"logprobs": True, "return_token_ids": True}
"""Asked of the server with every training rollout: the token ids and logprobs training needs."""

StepCallback = Callable[[dict[str, Any]], None]


@dataclass
class TrainResult:
    """What a run did: steps, held-out rewards before and after, where its outputs are (`rank` > 0: a torchrun rank that followed rank 0)."""

    output_dir: Path
    steps: int
    eval_before: float | None = None
    eval_after: float | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0
    sft_steps: int = 0
    rank: int = 0
    executor: dict[str, Any] = field(default_factory=lambda: {"kind": "local"})
    """Where the rollout groups ran: ``{"kind": "local"}``, or the Ray executor's `describe()` (actors, nodes, start-up)."""
    inference: dict[str, Any] = field(default_factory=dict)
    """What served the rollouts: ``engine`` (builtin / vllm), vLLM's ``version`` and ``log`` when the run started it."""
    model: Any = field(default=None, repr=False, compare=False)
    """Rank 0's trained policy (a shard of it under torchrun) and its `tokenizer`, for `RLTrainer`."""
    tokenizer: Any = field(default=None, repr=False, compare=False)


@contextlib.asynccontextmanager
async def inference_endpoint(
    config: TrainConfig,
    served: Any,
    tokenizer: Any,
    output_dir: Path,
    engine_info: dict[str, Any] | None = None,
    write_model: Callable[[Path], Awaitable[Any]] | None = None,
    mixed: torch.dtype | None = None,
    trainer_gpus: int = 1,
) -> AsyncIterator[tuple[str, WeightSync]]:
    """The server rollouts use and its weight sync.

    Args:
        config: the run (`inference.base_url` set: that server; else the built-in one here, or a
            vLLM server this run starts under ``engine = "vllm"``).
        served: the built-in server's own copy of the model (generation never sees weights
            mid-update); under ``engine = "vllm"`` the policy, saved for vLLM to load; unused with `inference.base_url`.
        tokenizer: the policy's tokenizer.
        output_dir: where weights for an external server are written.
        engine_info: filled with what served the rollouts (engine, version).
        write_model: under ``engine = "vllm"``, writes the policy's folder for vLLM (a command every rank
            runs under FSDP2, where no rank holds the whole model).
        mixed: the trainer's forward dtype, which vLLM serves in (bf16 on GPUs).
        trainer_gpus: on a GPU machine, the GPUs this host's trainer ranks use (vLLM gets others).
    """
    engine_info = {} if engine_info is None else engine_info
    inference = config.inference
    if inference.engine == "vllm" and inference.base_url is None:
        async with vllm_endpoint(
            config, served, tokenizer, output_dir, engine_info, write_model, mixed, trainer_gpus
        ) as endpoint:
            yield endpoint
        return
    if inference.base_url is not None:
        engine_info.update(engine=inference.engine, base_url=inference.base_url)
        yield inference.base_url, server_sync(config, inference.base_url, output_dir / "weights_for_server")
        return
    if inference.weight_sync != "in_process":
        raise ConfigError(f"inference.weight_sync = {inference.weight_sync!r} needs inference.base_url (a running server)")
    async with InferenceServer(
        served, tokenizer, model_name=inference.model_name, max_batch_size=builtin_batch_size(config), seed=config.seed
    ) as server:
        engine_info["engine"] = "builtin"
        yield server.url, InProcessWeightSync(server)


BUILTIN_ENGINE_THREADS = 1
"""Torch threads of the built-in engine (`InferenceServer`'s default `cpu_threads`)."""


def trainer_cpu_threads(
    config: TrainConfig, device: torch.device, cpu_count: int | None = None, local_ranks: int = 1
) -> int | None:
    """Torch threads for each trainer rank's steps on CPU when an engine this run started shares the machine, else None (torch's default).

    Generation runs while the trainer steps (one step ahead), so on CPU the trainer ranks on this host
    share the cores the engine (the built-in one's thread, or vLLM's CPU engine's `VLLM_CPU_THREADS`)
    and the event loop (the endpoint and the harness) leave, at least one each: OpenMP threads that
    outnumber free cores spin at every barrier, which made trainer steps 10-20x slower on two busy cores.
    """
    if device.type != "cpu" or config.inference.base_url is not None:
        return None
    engine = BUILTIN_ENGINE_THREADS if config.inference.engine == "builtin" else VLLM_CPU_THREADS
    cores = cpu_count if cpu_count is not None else usable_cores()
    return max(1, (cores - engine - 1) // max(1, local_ranks))


def torchrun_local_ranks() -> int:
    """The ranks torchrun started on this host (``LOCAL_WORLD_SIZE``), before the group is joined; 1 in one process."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) if under_torchrun() else 1
    except ValueError:
        raise ConfigError(f"torchrun's LOCAL_WORLD_SIZE must be an integer, got {os.environ['LOCAL_WORLD_SIZE']!r}") from None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: ``taskset``, a container's cpuset), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def local_ranks(group: RankGroup) -> int:
    """The run's ranks on this host (torchrun's ``LOCAL_WORLD_SIZE``; 1 in one process)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", group.world_size)) if group.distributed else 1


def rank_cpu_threads(config: TrainConfig, group: RankGroup, device: torch.device) -> int | None:
    """`trainer_cpu_threads` for one of the `group`'s ranks (the ranks on this host share the cores)."""
    return trainer_cpu_threads(config, device, local_ranks=local_ranks(group))


def builtin_batch_size(config: TrainConfig) -> int:
    """The built-in server's batch size: `inference.max_batch_size`, else every rollout in flight at once."""
    return config.inference.max_batch_size or config.rollouts.max_concurrent


def call_with_torch_threads(threads: int | None, function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` with `threads` torch threads on the calling thread (None: as they are); for a worker thread."""
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return function(*args)


def sft_rows(config: TrainConfig, env: Any) -> list[dict[str, Any]]:
    """The rows SFT trains on: a `module:object` reference (rows or a loader), else the environment's training rows."""
    data = config.sft.data
    if data != "answers" and ":" in data and not Path(data).exists():
        source = import_ref(data, "sft.data")
        return [dict(row) for row in (source() if callable(source) else source)]
    return [dict(row) for row in env.get_dataset()]


def build_sft_samples(config: TrainConfig, env: Any, tokenizer: Any) -> list[Sample]:
    data = config.sft.data
    if data.endswith(".jsonl"):
        return samples_from_results(Path(data), config.sft.min_reward)
    return samples_from_answers(tokenizer, sft_rows(config, env))


REWARD_STD_EPSILON = 1e-4


def sample_std(values: list[float]) -> float:
    """The sample (unbiased, n - 1) standard deviation, as TRL's ``rewards.std()`` takes it; 0 for fewer than 2 values."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def advantage_scales(batch: StepBatch, scale_rewards: RewardScaling) -> list[float]:
    """Each group's advantage multiplier: 1 / (reward sample std + 1e-4) of the group or the step, or 1 (``none``)."""
    if scale_rewards == "none":
        return [1.0] * len(batch.groups)
    if scale_rewards == "batch":
        std = sample_std([reward for group in batch.groups for reward in group.rewards])
        return [1.0 / (std + REWARD_STD_EPSILON)] * len(batch.groups)
    return [1.0 / (sample_std(list(group.rewards)) + REWARD_STD_EPSILON) for group in batch.groups]


def batch_samples(
    batch: StepBatch, max_seq_len: int | None, scale_rewards: RewardScaling = "none", mask_truncated: bool = False
) -> StateSamples:
    """A step's samples, advantages scaled as `scale_rewards` says, each group's marked with its staleness
    (so `mismatch_kl` can count fresh ones only); rollouts whose generation was cut left out when `mask_truncated`."""
    built = StateSamples()
    scales = advantage_scales(batch, scale_rewards)
    for group, staleness, scale in zip(batch.groups, batch.staleness, scales, strict=True):
        one = samples_from_states(group.states, max_seq_len, staleness, scale, mask_truncated)
        built.samples.extend(one.samples)
        built.counts.add(one.counts)
    return built


def step_metrics(step: int, batch: StepBatch, stats: dict[str, float], counts: Any, window_s: float) -> dict[str, Any]:
    """One `metrics.jsonl` line."""
    rewards = batch.counts.rewards
    trained = [reward for group in batch.groups for reward in group.rewards]
    advantages = [float(state.get("advantage") or 0.0) for group in batch.groups for state in group.states]
    return {
        "step": step + 1,
        "reward": statistics.fmean(rewards) if rewards else 0.0,
        "reward_std": statistics.pstdev(rewards) if rewards else 0.0,
        "reward_trained": statistics.fmean(trained) if trained else 0.0,
        "advantage_mean": statistics.fmean(advantages) if advantages else 0.0,
        "advantage_std": statistics.pstdev(advantages) if advantages else 0.0,
        "advantage_abs_mean": statistics.fmean(abs(a) for a in advantages) if advantages else 0.0,
        **stats,
        "rollout_tokens_per_s": batch.counts.completion_tokens / window_s if window_s > 0 else 0.0,
        "staleness_mean": statistics.fmean(batch.staleness) if batch.staleness else 0.0,
        "staleness_max": max(batch.staleness, default=0),
        "groups_trained": len(batch.groups),
        "groups_finished": batch.counts.finished_groups,
        "dropped_stale": batch.counts.dropped_stale,
        "filtered_zero_variance": batch.counts.filtered_zero_variance,
        "filtered_errors": batch.counts.filtered_errors,
        "samples": counts.samples,
        "new_sample_splits": counts.new_sample_splits,
        "steps_without_tokens": counts.steps_without_tokens,
        "truncated_samples": counts.truncated_samples,
        "masked_truncated": counts.masked_truncated,
        "step_time_s": window_s,
        "rss_mb": current_rss_mb(),
    }


async def evaluate(env: Any, config: TrainConfig, client: Any) -> float:
    """Held-out mean reward through `Env.evaluate` on the current weights."""
    result = await env.evaluate(
        client,
        config.inference.model_name,
        num_examples=config.eval.num_examples,
        rollouts_per_example=config.eval.rollouts_per_example,
        max_concurrent=config.rollouts.max_concurrent,
        sampling_args=dict(config.eval.sampling_args),
    )
    return float(result["metadata"]["avg_reward"])


class Progress:
    """A step's reward, loss and tokens/s as the run goes (or nothing, when disabled).

    On a terminal: a rich live progress bar. Elsewhere (CI logs, ``nohup``, ``| tee``): whole
    lines, never cut to a width, one per step but at most one per `line_interval_s` (the last step always).
    """

    def __init__(
        self, enabled: bool, total: int, start: int, *, stream: TextIO | None = None, line_interval_s: float = 5.0
    ) -> None:
        self.bar: Any = None
        self.stream = stream or sys.stdout
        self.lines = enabled and not self.stream.isatty()
        self.total = total
        self.line_interval_s = line_interval_s
        self.last_line = -math.inf
        if enabled and not self.lines:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
            )
            self.task = self.bar.add_task("train", total=total, completed=start, info="waiting for rollouts")
            self.bar.start()

    @staticmethod
    def info(metrics: dict[str, Any]) -> str:
        return (
            f"reward {metrics['reward']:.3f} loss {metrics['loss']:+.4f} "
            f"train {metrics['trainer_tokens_per_s']:.0f} tok/s rollout {metrics['rollout_tokens_per_s']:.0f} tok/s "
            f"filtered {metrics['filtered_zero_variance']} dropped {metrics['dropped_stale']}"
        )

    def update(self, metrics: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=metrics["step"], info=self.info(metrics))
        elif self.lines:
            now = time.monotonic()
            if now - self.last_line >= self.line_interval_s or metrics["step"] >= self.total:
                self.last_line = now
                self.message(f"train step {metrics['step']}/{self.total} {self.info(metrics)} ({metrics['step_time_s']:.1f} s)")

    def message(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        elif self.lines:
            print(text, file=self.stream, flush=True)
        else:
            logger.info(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def finish_outputs(result: TrainResult) -> None:
    """``plot.png`` and ``summary.json`` (held-out rewards, steps, wall time, memory at the first and last step)."""
    output_dir = result.output_dir
    evals = {"eval_before": result.eval_before, "eval_after": result.eval_after}
    lines = read_metrics(output_dir / "metrics.jsonl")
    if lines:
        plot_metrics(output_dir / "metrics.jsonl", output_dir / "plot.png", evals)
    write_json(
        output_dir / "summary.json",
        {
            **evals,
            "steps": result.steps,
            "sft_steps": result.sft_steps,
            "wall_time_s": result.wall_time_s,
            "executor": result.executor,
            "inference": result.inference,
            "rss_mb_first_step": lines[0]["rss_mb"] if lines else None,
            "rss_mb_last_step": lines[-1]["rss_mb"] if lines else None,
        },
    )


def rollout_processing(config: TrainConfig) -> LogitProcessing:
    """The distribution training rollouts sample from (`rollouts.sampling_args`), which the trainer recomputes.

    Raises:
        ConfigError: a temperature, top_p or top_k out of range or not a number.
    """
    try:
        return LogitProcessing.from_sampling_args(config.rollouts.sampling_args)
    except ValueError as exc:
        raise ConfigError(f"rollouts.sampling_args: {exc}") from None


def reference_start(config: TrainConfig, output_dir: Path, checkpoint: Path | None) -> Path | None:
    """Where a resumed run's KL reference loads from: ``step_0``, the checkpoint written when RL started
    (never the checkpoint being resumed); None for a new run (the policy is copied).

    Raises:
        ConfigError: resuming with a KL term and no ``step_0`` checkpoint to anchor to.
    """
    if checkpoint is None:
        return None
    start = checkpoint_dir(output_dir, 0)
    if not (start / "run.json").is_file():
        raise ConfigError(f"--resume with loss.kl_coef > 0: the KL reference {start} (where RL started) is missing")
    return start


def load_reference(config: TrainConfig, model: Any, output_dir: Path, checkpoint: Path | None) -> Any:
    """The KL reference (None when ``loss.kl_coef == 0``): the policy RL started from.

    A new run copies the policy (an SFT warm-up re-anchors it afterwards); a resumed run loads
    ``step_0`` (`reference_start`).
    """
    if config.loss.kl_coef <= 0:
        return None
    start = reference_start(config, output_dir, checkpoint)
    if start is None:
        return copy.deepcopy(model).eval()
    if is_sharded_checkpoint(start):
        return load_checkpoint_weights(load_policy(config.model)[0], start).eval()
    return load_policy(config.model, str(start / "model"))[0].eval()


def load_sharded_reference(config: TrainConfig, model: Any, output_dir: Path, checkpoint: Path | None, bf16: bool) -> Any:
    """`load_reference` sharded like `model`: built on the meta device, its shards copied from the policy's
    (a new run) or read from ``step_0`` (a resumed one)."""
    if config.loss.kl_coef <= 0:
        return None
    start = reference_start(config, output_dir, checkpoint)
    if start is not None:
        path, shards = (None, start) if is_sharded_checkpoint(start) else (str(start / "model"), None)
        return load_sharded_policy(config.model, path, bf16=bf16, keep_whole=False, shards=shards)[0].eval()
    reference = sharded_skeleton(config.model, None, bf16, next(model.parameters()).device)[0]
    copy_weights(reference, model)
    return reference.eval()


def unsharded_class_name(model: Any) -> str:
    """The model's own class name (FSDP2 makes a sharded model an instance of a subclass it names ``FSDP...``)."""
    own = [base for base in type(model).__bases__ if base is not FSDPModule]
    return own[0].__name__ if isinstance(model, FSDPModule) and own else type(model).__name__


RUN_STATE_COUNTS = ("step", "cursor", "metrics_lines", "sft_steps")


def read_run_state(path: Path) -> dict[str, Any]:
    """A checkpoint's ``run.json``, checked: a checkpoint folder is outside data, its positions must be positions.

    Raises:
        ConfigError: not a JSON object, a count that is not a non-negative integer, or `pending` not a list of them.
    """
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"--resume: {path}: not readable as JSON: {str(exc)[:200]}") from None
    if not isinstance(state, dict):
        raise ConfigError(f"--resume: {path}: expected a JSON object")

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    for name in RUN_STATE_COUNTS:
        if name in state and not count(state[name]):
            raise ConfigError(f"--resume: {path}: field {name!r}: expected a non-negative integer (got {state[name]!r:.60})")
    pending = state.get("pending", [])
    if not isinstance(pending, list) or not all(count(position) for position in pending):
        raise ConfigError(f"--resume: {path}: field 'pending': expected a list of non-negative integers (got {pending!r:.60})")
    return state


def resume_note(checkpoint: Path, step: int, config: TrainConfig) -> str:
    """The line `--resume` prints first: which checkpoint, the step it continues from, and what runs again."""
    note = f"v1 train: resuming from {checkpoint} at step {step} of {config.max_steps}"
    if step < config.max_steps:
        note += f"; steps after {step} that ran before are run again"
    if not config.checkpoint_every:
        note += " (checkpoint_every = 0 saves only before the first step and after the last: set it to lose fewer steps)"
    return note


@dataclass
class Prepared:
    """One rank's part of a run; `env`, `served` and `metrics_log` only on rank 0."""

    worker: RankWorker
    run_state: dict[str, Any]
    checkpoint: Path | None
    env: Any = None
    served: Any = None
    metrics_log: MetricsLog | None = None
    mixed: torch.dtype | None = None
    """The forward passes' dtype (bf16 on GPUs), whether autocast or FSDP2's policy casts."""


def prepare(config: TrainConfig, resume: bool, group: RankGroup | None = None, env: Any = None) -> Prepared:
    """Model (from the latest checkpoint when resuming), sharded with FSDP2 across `group`, and trainer; on rank 0
    also the environment (`env` when given, else loaded from ``[env]``), the built-in server's copy of the model and the metrics log."""
    group = group or RankGroup.single()
    if not config.loss.policy_gradient:
        raise ConfigError(
            "loss.kind = 'sft' is the objective v1 sft and the [sft] warm-up choose themselves; RL trains with grpo, dapo or cispo"
        )
    processing = rollout_processing(config)
    output_dir = config.make_output_dir()
    torch.manual_seed(config.seed)
    if group.is_leader and env is None:
        env = load_environment(config.env.id, taskset=config.env.taskset, harness=config.env.harness)
    checkpoint = latest_checkpoint(output_dir) if resume else None
    if resume and checkpoint is None:
        raise ConfigError(f"--resume: no checkpoint in {output_dir / 'checkpoints'}")
    run_state = read_run_state(checkpoint / "run.json") if checkpoint else {}
    shards = checkpoint if checkpoint is not None and is_sharded_checkpoint(checkpoint) else None
    path = str(checkpoint / "model") if checkpoint is not None and shards is None else None
    builtin_here = config.inference.base_url is None and config.inference.engine == "builtin"
    mixed = autocast_dtype(config.model, resolve_device(config.model.device))
    architectures = None
    if group.distributed and config.model.lora is not None:
        raise ConfigError("model.lora under torchrun is not supported yet (FSDP2 over a peft model is untested): run one process")
    if group.distributed:
        bf16 = mixed is torch.bfloat16
        keep_whole = group.is_leader and builtin_here
        model, tokenizer, device, whole = load_sharded_policy(config.model, path, bf16=bf16, keep_whole=keep_whole, shards=shards)
        served = whole.to(device).eval() if whole is not None else None  # rank 0's whole load: the built-in engine's copy
        reference = load_sharded_reference(config, model, output_dir, checkpoint, bf16)
        architectures = [unsharded_class_name(model)]
        mixed = None  # FSDP2's mixed-precision policy casts instead of autocast
    else:
        model, tokenizer, device = load_policy(config.model, path)
        if shards is not None:
            load_checkpoint_weights(model, shards)
        reference = load_reference(config, model, output_dir, checkpoint)
        served = inference_copy(model) if builtin_here else None
    trainer = PolicyTrainer.from_config(
        config, model, tokenizer, ref_model=reference, autocast_dtype=mixed, processing=processing
    )
    if checkpoint:
        trainer.load(checkpoint)
    metrics_log = None
    if group.is_leader:
        keep = run_state.get("metrics_lines") if checkpoint else None
        metrics_log = MetricsLog(output_dir / "metrics.jsonl", keep_lines=keep)
    worker = RankWorker(config, model, tokenizer, trainer, output_dir, group.rank, architectures)
    return Prepared(worker, run_state, checkpoint, env, served, metrics_log, autocast_dtype(config.model, device))


async def train(
    config: TrainConfig,
    *,
    resume: bool = False,
    progress: bool = False,
    on_step: StepCallback | None = None,
    env: Any = None,
) -> TrainResult:
    """Run RL training as `config` says (see the module docs); returns what it did.

    Under torchrun every rank calls this; rank 0's result has the run's figures, the other
    ranks' only the step count.

    Args:
        config: the run.
        resume: continue from the latest checkpoint in `output_dir` (step count, optimizer,
            data order and metrics log restored).
        progress: show a live progress bar (rank 0).
        on_step: called with each step's metrics (rank 0).
        env: the environment as an `Env` already loaded (`RLTrainer`); None: loaded from ``[env]``.
    """
    started = time.time()
    if config.ray is not None and config.ray.address != "local":  # before any model loads: every rank alike
        await asyncio.to_thread(check_ray_address, config.ray.address)
    check_before_loading(config, torchrun_local_ranks())
    watch = watch_launcher()
    # One thread does all of this rank's torch work: the CUDA device set at the group's start and
    # torch's OpenMP thread team both belong to the thread, and `asyncio.to_thread` hops between threads.
    rank_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="v1-trainer")
    loop = asyncio.get_running_loop()
    group = await loop.run_in_executor(rank_thread, RankGroup.start, config.distributed)
    try:
        prepared = await loop.run_in_executor(rank_thread, prepare, config, resume, group, env)
        if not group.is_leader:
            threads = rank_cpu_threads(config, group, prepared.worker.trainer.device)
            await loop.run_in_executor(rank_thread, call_with_torch_threads, threads, group.follow, prepared.worker)
            trainer = prepared.worker.trainer
            return TrainResult(prepared.worker.output_dir, trainer.step, wall_time_s=time.time() - started, rank=group.rank)
        with frozen_heap():
            recipe = TrainRecipe(
                config, prepared, group, progress=progress, on_step=on_step, started=started, rank_thread=rank_thread
            )
            result = await recipe.run()
        result.model, result.tokenizer = prepared.worker.model, prepared.worker.tokenizer
        return result
    except Exception as exc:
        if watch is not None:  # the launcher died and another rank left first: its line, not this error
            watch.exit_if_parent_gone()
        if group.distributed and _peer_lost(exc):  # another rank died mid-collective: one line, as SIGTERM would give
            exit_now(f"rank {group.rank}: another rank's connection closed mid-collective (it died or was stopped)", 1)
        raise
    finally:
        await loop.run_in_executor(rank_thread, group.close)
        rank_thread.shutdown(wait=False)
        if watch is not None:
            watch.stop()


PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")
"""How gloo words a collective whose peer process ended."""


def _peer_lost(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and any(words in str(exc) for words in PEER_LOST)


def watch_launcher() -> ParentWatch | None:
    """Under torchrun: end this rank when torchrun exits (its workers run in sessions of their own, so
    nothing else would) or sends SIGTERM (it does when another rank failed), with one line and the
    engine this rank started stopped. None in one process."""
    if not under_torchrun():
        return None
    who = f"rank {os.environ['RANK']}"
    watch = ParentWatch(who, "the launcher (torchrun)")
    if threading.current_thread() is threading.main_thread():
        exit_on_sigterm(who, watch)
    return watch.start()


async def rollout_executor(config: TrainConfig) -> RayExecutor | None:
    """The Ray executor `config.ray` asks for, connected (None: groups run on this loop).

    Raises:
        ConfigError: nothing answers at the address.
    """
    if config.ray is None:
        return None
    ray = config.ray
    executor = RayExecutor(
        None if ray.address == "local" else ray.address,
        actors=ray.actors,
        actor_concurrency=ray.actor_concurrency,
        num_cpus=ray.num_cpus,
    )
    await asyncio.to_thread(executor.connect)
    return executor


def trainable_samples(batch: StepBatch, config: TrainConfig) -> StateSamples:
    """`batch_samples` as `config` says, refused in one line when no rollout of the step can train.

    Raises:
        ConfigError: every rollout was cut and masked, or none has token ids (a server that does not return them).
    """
    built = batch_samples(batch, config.max_seq_len, config.loss.scale_rewards, config.loss.mask_truncated_completions)
    if not built.samples and built.counts.masked_truncated:
        raise ConfigError(
            f"step {batch.step + 1}: every rollout was cut by a token limit and loss.mask_truncated_completions "
            "leaves it without loss: raise rollouts.sampling_args.max_tokens (or max_seq_len)"
        )
    if not built.samples:
        raise ConfigError(
            "no rollout of this step has token ids: the server must return them "
            "(inference.client_type openai_chat_completions_token or renderer, or a server honouring return_token_ids)"
        )
    return built


class TrainRecipe:
    """Rank 0's run (the only rank of a one-process run), in phases: `set_up`, `warm_up`, `step`, `evaluate`,
    `save`, `close`; `run` runs them in order.

    The trainer is the one `prepare` built (`PolicyTrainer.from_config`); every rank's part of a phase (an
    SFT warm-up, a step, a gather, a save) is a command sent through `group`, run on `rank_thread` (the
    thread that started the group; default: a new one): torch's OpenMP thread team belongs to the thread that
    started it, and `asyncio.to_thread` would hop between pool threads, each building a team.

    Args:
        config: the run.
        prepared: this rank's model, trainer, environment and outputs (`prepare`).
        group: the run's ranks.
        progress: show a live progress bar.
        on_step: called with each step's metrics.
        started: when the run started (`time.time()`), for its wall time.
        rank_thread: the thread that runs this rank's torch work.
    """

    sync: WeightSync
    """The weight sync to the inference server (set by `run` once the server is up)."""
    client: Any
    """The inference server's client config, for rollouts and evals (set by `run`)."""
    bar: Progress
    """The progress bar or lines (set by `run`)."""

    def __init__(
        self,
        config: TrainConfig,
        prepared: Prepared,
        group: RankGroup,
        *,
        progress: bool = False,
        on_step: StepCallback | None = None,
        started: float | None = None,
        rank_thread: ThreadPoolExecutor | None = None,
    ) -> None:
        assert prepared.metrics_log is not None, "rank 0 keeps the metrics log"
        self.config, self.prepared, self.group = config, prepared, group
        self.worker, self.trainer, self.env = prepared.worker, prepared.worker.trainer, prepared.env
        self.metrics_log = prepared.metrics_log
        self.progress, self.on_step = progress, on_step
        self.started = started if started is not None else time.time()
        self.earlier_wall_time = float(prepared.run_state.get("wall_time_s", 0.0))  # the segments before this resume
        self.result = TrainResult(self.worker.output_dir, self.trainer.step, eval_before=prepared.run_state.get("eval_before"))
        self.threads = rank_cpu_threads(config, group, self.trainer.device)
        self.own_thread = rank_thread is None
        self.rank_thread = rank_thread or ThreadPoolExecutor(max_workers=1, thread_name_prefix="v1-trainer")
        self.trackers: list[Tracker] = []
        self.executor: RayExecutor | None = None

    async def run(self) -> TrainResult:
        """The whole run: set-up, the steps (each saved when due), the last eval, close; the outputs written."""
        config = self.config
        self.trackers = open_trackers(config)
        if self.prepared.checkpoint is not None:
            print(resume_note(self.prepared.checkpoint, self.trainer.step, config), file=sys.stderr, flush=True)
        self.bar = Progress(self.progress, config.max_steps, self.trainer.step)
        failed = True
        try:
            async with self.endpoint() as (url, sync):
                self.sync, self.client = sync, config.inference.client_config(url)
                # the syncs that take a streamed update (the engine's, the file syncs'); vLLM's NCCL broadcast does not
                self.worker.weight_receiver = getattr(sync, "receiving", None)
                await self.set_up()
                async with await self.orchestrator() as orchestrator:
                    await self.steps(orchestrator)
                self.result.steps = self.trainer.step
                if config.eval.at_end:
                    self.result.eval_after = await self.evaluate("after RL")
            failed = False
        finally:
            await self.close(failed)
        self.result.wall_time_s = self.wall_time()
        await asyncio.to_thread(finish_outputs, self.result)
        return self.result

    def endpoint(self) -> contextlib.AbstractAsyncContextManager[tuple[str, WeightSync]]:
        """The inference server the rollouts and evals use, and its weight sync (`inference_endpoint`)."""
        served = self.prepared.served if self.prepared.served is not None else self.worker.model
        write_model = self.write_model if self.group.distributed else None
        return inference_endpoint(
            self.config, served, self.worker.tokenizer, self.worker.output_dir, self.result.inference,
            write_model, self.prepared.mixed, local_ranks(self.group),
        )  # fmt: skip

    async def set_up(self) -> None:
        """A new run: the SFT warm-up (`sft.warmup`), the held-out eval before RL (`eval.at_start`) and
        checkpoint ``step_0``. A resumed run: the checkpoint's weights to the server (which may serve
        others: an external one always does)."""
        if self.prepared.checkpoint is not None:
            self.result.sft_steps = int(self.prepared.run_state.get("sft_steps", 0))
            await self.sync.push(await self.on_every_rank(GatherCommand()), self.trainer.step)
            return
        if self.config.sft.warmup:
            await self.warm_up()
        if self.config.eval.at_start:
            self.result.eval_before = await self.evaluate("before RL")
        await self.save(0, {"cursor": 0, "pending": []})

    async def warm_up(self) -> None:
        """SFT steps on every rank (each on its share of each batch; `RankWorker.sft`), then their weights to the server."""
        config, ranks = self.config, self.group.world_size
        samples = build_sft_samples(config, self.env, self.worker.tokenizer)
        shares = [
            share_samples(batch, ranks) for batch in sft_batches(samples, config.sft.steps, config.sft.batch_size, config.seed)
        ]
        history, weights = await self.on_ranks([SFTCommand([share[rank] for share in shares]) for rank in range(ranks)])
        self.result.sft_steps = len(history)
        self.bar.message(f"sft warm-up: {len(history)} steps, loss {history[0]['loss']:.3f} -> {history[-1]['loss']:.3f}")
        await self.sync.push(weights, 0)

    async def orchestrator(self) -> Orchestrator:
        """The rollouts' orchestrator, from the data order where the run is (groups on Ray actors under `[ray]`)."""
        config, run_state = self.config, self.prepared.run_state
        rollouts = config.rollouts.model_copy(update={"sampling_args": {**config.rollouts.sampling_args, **TOKEN_SAMPLING_ARGS}})
        self.executor = await rollout_executor(config)
        return Orchestrator(
            self.env, self.client, config.inference.model_name, rollouts,
            start_step=self.trainer.step, cursor=run_state.get("cursor", 0), pending=run_state.get("pending", []),
            executor=self.executor,
        )  # fmt: skip

    async def steps(self, orchestrator: Orchestrator) -> None:
        """`step` until `max_steps`: each one's eval (`eval.every`), metrics, and checkpoint when due."""
        first_step = self.trainer.step
        window_start = time.perf_counter()
        while self.trainer.step < self.config.max_steps:
            metrics = await self.step(orchestrator, window_start)
            step = self.trainer.step
            if self.due(self.config.eval.every):
                metrics["eval_reward"] = await self.evaluate(f"at step {step}")
            if step == first_step + 1:
                freeze_heap()  # the first step imported the SDK clients and filled the pools
            window_start = time.perf_counter()
            await self.record(metrics)
            if step == self.config.max_steps or self.due(self.config.checkpoint_every):
                await self.save(step, orchestrator.checkpoint_state())

    async def step(self, orchestrator: Orchestrator, window_start: float) -> dict[str, Any]:
        """One RL step: the next batch of groups trained on by every rank, the new weights to the server and
        the orchestrator; its metrics (times from `window_start`, when the step began waiting for rollouts)."""
        batch = await orchestrator.next_batch()
        rollouts_done = time.perf_counter()
        built = trainable_samples(batch, self.config)
        weight = min(1.0, len(batch.groups) / self.config.rollouts.examples_per_step)
        shares = share_samples(built.samples, self.group.world_size)
        stats, weights = await self.on_ranks([TrainCommand(share, weight) for share in shares])
        trained = time.perf_counter()
        await self.sync.push(weights, self.trainer.step)
        await orchestrator.set_version(self.trainer.step)
        now = time.perf_counter()
        metrics = step_metrics(batch.step, batch, stats, built.counts, now - window_start)
        metrics["rollout_wait_s"] = rollouts_done - window_start
        metrics["weight_sync_s"] = now - trained
        return metrics

    async def evaluate(self, when: str) -> float:
        """The held-out reward on the server's current weights (`evaluate`), shown as the eval `when` it ran."""
        reward = await evaluate(self.env, self.config, self.client)
        self.bar.message(f"held-out eval {when}: reward {reward:.3f}")
        return reward

    async def save(self, step: int, data_order: dict[str, Any]) -> None:
        """Checkpoint `step` on every rank, with what resuming needs: the orchestrator's `data_order`, the
        metrics log's length, the eval before RL, the warm-up's steps and the wall time so far."""
        run_state = {
            **data_order,
            "metrics_lines": self.metrics_log.lines,
            "eval_before": self.result.eval_before,
            "sft_steps": self.result.sft_steps,
            "wall_time_s": self.wall_time(),
        }
        await self.on_every_rank(SaveCommand(step, run_state))

    async def close(self, failed: bool) -> None:
        """Stop what the run started (progress bar, environment, Ray executor, trackers) and tell the other ranks
        the run is over, after the command in flight if any (a cancelled await does not stop it), so every rank's
        collectives pair up."""
        self.bar.close()
        if self.env is not None:
            await self.env.teardown()
        if self.executor is not None:
            self.result.executor = self.executor.describe()
            await asyncio.to_thread(self.executor.close)
        for tracker in self.trackers:
            tracker.close()
        await asyncio.get_running_loop().run_in_executor(self.rank_thread, self.group.stop, self.worker, failed)
        if self.own_thread:
            self.rank_thread.shutdown(wait=False)

    async def record(self, metrics: dict[str, Any]) -> None:
        """A step's metrics to ``metrics.jsonl``, the result, the progress bar, the trackers and `on_step`."""
        await asyncio.to_thread(self.metrics_log.write, metrics)
        self.result.metrics.append(metrics)
        self.bar.update(metrics)
        for tracker in self.trackers:
            tracker.log(metrics, metrics["step"])
        if self.on_step is not None:
            self.on_step(metrics)

    async def on_ranks(self, commands: list[Any]) -> Any:
        """Each rank its command (one per rank) on the rank thread; rank 0's result."""
        call = functools.partial(call_with_torch_threads, self.threads, self.group.run, commands, self.worker)
        return await asyncio.get_running_loop().run_in_executor(self.rank_thread, call)

    async def on_every_rank(self, command: Any) -> Any:
        """The same command on every rank; rank 0's result."""
        return await self.on_ranks([command] * self.group.world_size)

    async def write_model(self, folder: Path) -> None:
        """The policy as a ``save_pretrained`` folder, gathered from every rank's shard (vLLM's first weights)."""
        await self.on_every_rank(SaveModelCommand(folder))

    def due(self, every: int) -> bool:
        """Whether the step just trained is one of every `every` (0: never)."""
        return bool(every) and self.trainer.step % every == 0

    def wall_time(self) -> float:
        """The run's wall time so far, the segments before a resume included."""
        return self.earlier_wall_time + time.time() - self.started


def run_sft(config: TrainConfig) -> TrainResult:
    """Supervised fine-tuning (`config.sft`) with the RL masking; saves ``output_dir/sft/model`` (one process)."""
    if under_torchrun():
        raise ConfigError("v1 sft runs in one process; torchrun is for v1 train")
    started = time.time()
    output_dir = config.make_output_dir()
    torch.manual_seed(config.seed)
    env = load_environment(config.env.id, taskset=config.env.taskset, harness=config.env.harness)
    model, tokenizer, device = load_policy(config.model)
    samples = build_sft_samples(config, env, tokenizer)
    trainer = PolicyTrainer.from_config(config.for_sft(), model, tokenizer, autocast_dtype=autocast_dtype(config.model, device))
    log = MetricsLog(output_dir / "sft_metrics.jsonl")
    history = [trainer.train_step(batch) for batch in sft_batches(samples, config.sft.steps, config.sft.batch_size, config.seed)]
    for step, stats in enumerate(history, 1):
        log.write({"step": step, **stats})
    model.save_pretrained(output_dir / "sft" / "model")
    tokenizer.save_pretrained(output_dir / "sft" / "model")
    metrics = [{"step": step, **stats} for step, stats in enumerate(history, 1)]
    return TrainResult(output_dir, 0, metrics=metrics, wall_time_s=time.time() - started, sft_steps=len(history))


__all__ = [
    "TOKEN_SAMPLING_ARGS",
    "TrainRecipe",
    "TrainResult",
    "builtin_batch_size",
    "evaluate",
    "finish_outputs",
    "inference_endpoint",
    "prepare",
    "read_run_state",
    "resume_note",
    "run_sft",
    "step_metrics",
    "train",
    "trainable_samples",
    "trainer_cpu_threads",
]
