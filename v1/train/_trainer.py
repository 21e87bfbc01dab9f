"""`PolicyTrainer`: optimizer steps of a causal LM on token samples (an objective of the loss family: RL or SFT).

One step: the samples are split into micro-batches (gradient accumulation); each computes
the sampled tokens' log-probabilities, the loss (normalised by the whole step's token or
sequence count, so accumulation does not change the gradient), and back-propagates; then
the gradient norm is clipped, AdamW steps, and the learning-rate schedule advances.
Statistics are detached Python floats: nothing of a step's graph outlives it.

Under ``torchrun`` each rank trains on its share of the step's samples and the model is
sharded with FSDP2 (`fully_shard` per decoder layer). The step's token and sequence counts
are summed across ranks, so each rank's loss is already its part of the whole step's loss:
gradients are therefore summed across ranks (not averaged), and a step on N ranks gives
the gradient one process would compute on all the samples. Every rank runs the same
number of forward/backward passes (FSDP's collectives pair up): a rank with fewer
micro-batches runs passes on a padding sample that carries no loss.
"""

from __future__ import annotations

import math
import os
import pickle
import statistics
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from v1.errors import ConfigError, Error
from v1.inference import LogitProcessing
from v1.train._batch import Sample, TensorBatch, collate, micro_batches
from v1.train._config import OptimConfig, TrainConfig
from v1.train._data_only import unpickling_reason
from v1.train._logprobs import (
    activation_checkpointing,
    is_distributed,
    is_sharded,
    register_decoder,
    shared_prefix_logprobs,
    token_logprobs,
)
from v1.train._lora import is_lora, merged_state_dict
from v1.train._losses import LossConfig, LossResult, policy_loss, update_statistics
from v1.train._packing import PackedRow, pack_by_tokens, packed_row
from v1.train._shards import (
    ShardFiles,
    is_sharded_checkpoint,
    read_optimizer_shards,
    read_trainer_state_json,
    write_shard,
    write_trainer_state,
)
from v1.train._shared_prefix import SharedPrefixBatch, plan_micro_batches, shared_prefix_batch


def current_rss_mb() -> float:
    """This process's resident memory now, in MiB (Linux /proc; 0.0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def lr_factor(step: int, optim: OptimConfig, max_steps: int) -> float:
    """The learning-rate multiplier at `step`: linear warmup, then constant, linear or cosine decay."""
    if optim.warmup_steps and step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.schedule == "constant" or max_steps <= optim.warmup_steps:
        return 1.0
    progress = min(1.0, (step - optim.warmup_steps) / max(1, max_steps - optim.warmup_steps))
    decay = 1.0 - progress if optim.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * decay


class TrainingDiverged(Error):
    """A training step's loss or gradient norm is not finite: the run stops before the optimizer steps."""

    exit_status: ClassVar[int] = 3
    """`v1 train`'s exit status for it (bad input is 2)."""


TRAINER_STATE_FIELDS = ("optimizer", "scheduler", "step")

OPTIMIZER_SETTINGS = ("initial_lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "decoupled_weight_decay")
"""The param-group settings a checkpoint must agree on with the config: AdamW's arithmetic (the configured
learning rate, before the schedule), not its kernel (``fused``, ``foreach``: this process's choice)."""

OPTIMIZER_STATE_KEYS = frozenset({"step", "exp_avg", "exp_avg_sq"})
"""What a checkpoint may restore of each parameter's AdamW state: its moments and its step count."""

UPDATE_SUMS = (
    "loss",
    "entropy",
    "clipped",
    "ratio",
    "kl",
    "mismatch_kl",
    "stale_kl",
    "fresh_tokens",
    "sampler_weight",
    "sampler_bounded",
    "tokens",
)
"""What an update sums over its micro-batches (then across ranks): `update_statistics` turns them into its statistics."""


def pad_id_of(tokenizer: Any) -> int:
    """The tokenizer's padding id (0 when it has none)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


def read_trainer_state(path: Path) -> dict[str, Any]:
    """``trainer.pt`` as `PolicyTrainer.save` writes it, loaded with ``weights_only=True`` (nothing in it runs).

    Raises:
        ConfigError: one line naming the file: not loadable as tensors and plain data, or not a trainer state.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ConfigError(
            f"--resume: {path}: refused: {unpickling_reason(exc)[:300]}; a checkpoint is loaded as data only, nothing in it runs"
        ) from None
    except (OSError, RuntimeError, EOFError) as exc:
        raise ConfigError(f"--resume: {path}: not a trainer state this v1 wrote: {str(exc)[:200]}") from None
    if not isinstance(state, dict) or any(field not in state for field in TRAINER_STATE_FIELDS):
        raise ConfigError(f"--resume: {path}: not a trainer state this v1 wrote (expected {', '.join(TRAINER_STATE_FIELDS)})")
    return state


def shard_with_fsdp2(model: torch.nn.Module, bf16: bool) -> torch.nn.Module:
    """Shard `model` with FSDP2 across the default process group: each decoder layer, then the root.

    Parameters are bf16 and reductions fp32 when `bf16`. Gradients are summed across ranks
    (divide factor 1, sum reductions: gloo has no pre-multiplied sum), because the trainer's
    loss is normalised by the whole step's counts.
    """
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    register_decoder(model)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


class PolicyTrainer:
    """Trains `model` one step at a time.

    Args:
        model: a causal LM (transformers ``*ForCausalLM``), already on its device.
        loss: the objective (``kind``: an RL loss, or ``sft``) and its settings.
        optim: AdamW, clipping and schedule settings.
        max_steps: the schedule's horizon.
        micro_batch_size: samples per forward/backward.
        pad_id: the padding token id.
        ref_model: the frozen reference policy for the KL term (needed when ``loss.kl_coef > 0``).
        autocast_dtype: run forward passes under autocast in this dtype (bf16 on GPUs), or None.
        processing: the rollouts' sampling distribution (temperature, top-p, top-k): RL
            log-probabilities are recomputed under it, as the server reported them (SFT: the default, raw).
        micro_batch_tokens: pack samples into rows of at most this many tokens (one row per
            forward/backward, attention within each sample) instead of `micro_batch_size` padded rows.
        share_prefixes: run the tokens that samples of a micro-batch share before their first
            prediction (a group's prompt) once per micro-batch (`v1.train`); the
            model's own forward when it cannot (see `shared_prefix_logprobs`). Not with packing.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss: LossConfig,
        optim: OptimConfig,
        *,
        max_steps: int,
        micro_batch_size: int = 16,
        pad_id: int = 0,
        ref_model: torch.nn.Module | None = None,
        autocast_dtype: torch.dtype | None = None,
        processing: LogitProcessing = LogitProcessing(),
        micro_batch_tokens: int | None = None,
        share_prefixes: bool = False,
    ) -> None:
        if micro_batch_tokens is not None and micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1, not {micro_batch_tokens}")
        self.model = model
        self.processing = processing
        self.micro_batch_tokens = micro_batch_tokens
        self.share_prefixes = share_prefixes and micro_batch_tokens is None and not activation_checkpointing(model)
        self.loss = loss
        self.optim_config = optim
        self.max_steps = max_steps
        self.micro_batch_size = micro_batch_size
        self.pad_id = pad_id
        self.ref_model = ref_model
        self.autocast_dtype = autocast_dtype
        self.device = next(model.parameters()).device
        self.step = 0
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=optim.lr,
            betas=optim.betas,
            weight_decay=optim.weight_decay,
            foreach=self.device.type == "cuda",
            fused=self.device.type == "cpu" and not is_distributed(),  # one pass per tensor: 2 updates at 0.5B 10 -> 2.9 s
        )
        self.scheduler = self._schedule(self.step)
        if loss.kl_coef > 0 and ref_model is None:
            raise ValueError("loss.kl_coef > 0 needs a ref_model")
        if ref_model is not None:
            ref_model.eval().requires_grad_(False)

    def _schedule(self, step: int) -> torch.optim.lr_scheduler.LambdaLR:
        """The configured schedule positioned at `step` (it sets every group's learning rate for that step)."""
        optim, max_steps = self.optim_config, self.max_steps
        return torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda at: lr_factor(at, optim, max_steps), last_epoch=step - 1)

    def optimizer_settings(self) -> list[dict[str, Any]]:
        """Each param group's `OPTIMIZER_SETTINGS` as this trainer's config makes them."""
        return [{key: _plain(group.get(key)) for key in OPTIMIZER_SETTINGS} for group in self.optimizer.param_groups]

    @classmethod
    def from_config(
        cls,
        config: TrainConfig,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        ref_model: torch.nn.Module | None = None,
        autocast_dtype: torch.dtype | None = None,
        processing: LogitProcessing = LogitProcessing(),
    ) -> PolicyTrainer:
        """The trainer a run's `config` describes: its loss, optimizer, steps and micro-batching
        (``config.for_sft()``: its SFT, with the ``sft`` objective).

        Args:
            config: the run.
            model: the policy (sharded already under FSDP2).
            tokenizer: its tokenizer (the padding id).
            ref_model, autocast_dtype, processing: as the constructor takes them.
        """
        return cls(
            model,
            config.loss,
            config.optim,
            max_steps=config.max_steps,
            micro_batch_size=config.micro_batch_size,
            micro_batch_tokens=config.micro_batch_tokens,
            share_prefixes=config.share_prefixes,
            pad_id=pad_id_of(tokenizer),
            ref_model=ref_model,
            autocast_dtype=autocast_dtype,
            processing=processing,
        )

    def anchor_reference(self) -> None:
        """Make the reference policy a frozen copy of the policy's weights now (after an SFT warm-up, say).

        Parameters are copied one by one (local shards under FSDP2, where both models are sharded alike).
        """
        if self.ref_model is None:
            return
        with torch.no_grad():
            for reference, current in zip(self.ref_model.parameters(), self.model.parameters(), strict=True):
                reference.copy_(current)

    def _autocast(self) -> Any:
        if self.autocast_dtype is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _global_sum(self, *values: float) -> list[float]:
        if not is_distributed():
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def _global_max(self, value: int) -> int:
        if not is_distributed():
            return value
        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def _micro_batches(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        """This rank's micro-batches, padded with loss-free ones to the most any rank has."""
        if self.micro_batch_tokens is not None:
            chunks = pack_by_tokens(samples, self.micro_batch_tokens)
        elif self.share_prefixes:
            chunks = plan_micro_batches(samples, self.micro_batch_size)
        else:
            chunks = micro_batches(samples, self.micro_batch_size)
        idle = Sample([self.pad_id, self.pad_id], [0, 0], [0.0, 0.0], [0.0, 0.0])
        return chunks + [[idle]] * (self._global_max(len(chunks)) - len(chunks))

    def _logprobs(
        self,
        model: torch.nn.Module,
        batch: TensorBatch,
        packed: PackedRow | None,
        shared: SharedPrefixBatch | None,
        processing: LogitProcessing,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`token_logprobs` at `batch`'s loss positions, in its padded layout: from one packed row
        when `packed` is given, with each prefix run once when `shared` is (and the model can)."""
        where = batch.loss_mask > 0
        if shared is not None:
            result = shared_prefix_logprobs(model, shared, processing)
            if result is not None:
                return result
            self.share_prefixes = False  # this model cannot: its own forward from now on
        if packed is None:
            return token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets, processing, where=where)
        packed_where = torch.zeros_like(packed.targets, dtype=torch.bool)
        packed_where[0, packed.index[where]] = True
        logprobs, entropy = token_logprobs(
            model, packed.input_ids, None, packed.targets, processing, position_ids=packed.position_ids, where=packed_where
        )
        return packed.unpack(logprobs), packed.unpack(entropy)

    def train_step(self, samples: Sequence[Sample], *, weight: float = 1.0) -> dict[str, float]:
        """One step on `samples` (this rank's share when distributed) and its statistics.

        A step is `optim.updates_per_step` optimizer updates on the same samples (SFT's optimizer has one).
        Every update's importance ratio is against the inference logprobs, so the clip bounds how
        far the updates move from the policy that generated the samples. The statistics are the
        first update's (the policy that generated the samples), with the tokens of all updates and
        ``clip_fraction`` the mean over all updates (the first one's ratio is often 1: nothing clipped yet).

        Args:
            samples: token samples with loss masks, inference logprobs and advantages.
            weight: this step's learning rate is the schedule's times `weight` (a step on fewer
                groups than a full step's moves by their share, so a late step on 2 groups does not
                move at the full rate; scaling the loss would not do it: Adam's update ignores scale).
        """
        if not weight >= 0.0:
            raise ValueError(f"train_step weight must be >= 0, not {weight}")
        started = time.perf_counter()
        self.model.train()
        total_tokens, total_sequences = self._global_sum(
            float(sum(s.loss_tokens for s in samples)), float(sum(1 for s in samples if s.loss_tokens))
        )
        updates = self.optim_config.updates_per_step
        for param_group in self.optimizer.param_groups:  # the scheduler's next step sets the full rate again
            param_group["lr"] *= weight
        chunks = self._micro_batches(samples)
        old_logprobs: list[torch.Tensor] = []  # the first update's, before it steps: the policy the step starts from
        stats = [self._update(chunks, total_tokens, total_sequences, old_logprobs) for _ in range(updates)]
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        self.step += 1
        seen = sum(update["trainer_tokens"] for update in stats)
        elapsed = time.perf_counter() - started
        first = stats[0]
        if "clip_fraction" in first:
            first["clip_fraction"] = statistics.fmean(update["clip_fraction"] for update in stats)
        return {
            **first,
            "step_weight": weight,
            "lr": lr,
            "trainer_tokens": seen,
            "trainer_tokens_per_s": seen / elapsed if elapsed > 0 else 0.0,
            "train_time_s": elapsed,
        }

    def _shared_prefix_batch(self, chunk: Sequence[Sample]) -> SharedPrefixBatch | None:
        """`chunk`'s shared-prefix layout when it pays, on every rank or none (a sharded model's
        layers gather their weights once per pass: every rank must run the same passes)."""
        if not self.share_prefixes:
            return None
        shared = shared_prefix_batch(chunk, self.pad_id)
        if self._global_max(int(shared is None)):
            return None
        return shared.to(self.device) if shared is not None else None

    def _update(
        self, chunks: list[list[Sample]], total_tokens: float, total_sequences: float, old_logprobs: list[torch.Tensor]
    ) -> dict[str, float]:
        """One optimizer update: gradient accumulation over the micro-batches, clipping, AdamW.

        With a sampler correction, `old_logprobs` holds each micro-batch's log-probabilities before the
        step's first update: that update fills it, the later ones read it.
        """
        sums = dict.fromkeys(UPDATE_SUMS, 0.0)
        input_tokens = 0
        for index, chunk in enumerate(chunks):
            batch = collate(chunk, self.pad_id).to(self.device)
            input_tokens += batch.num_tokens if chunk[0].loss_tokens else 0
            packed = packed_row(chunk).to(self.device) if self.micro_batch_tokens is not None else None
            shared = self._shared_prefix_batch(chunk)
            with self._autocast():
                logprobs, entropy = self._logprobs(self.model, batch, packed, shared, self.processing)
                ref_logprobs = self._reference_logprobs(batch, packed, shared)
            result = policy_loss(
                logprobs,
                batch.inference_logprobs,
                batch.advantages,
                batch.loss_mask,
                self.loss,
                ref_logprobs=ref_logprobs,
                old_logprobs=self._old_logprobs(index, logprobs, old_logprobs),
                total_tokens=total_tokens,
                total_sequences=total_sequences,
            )
            self._add_sums(sums, result, batch, chunk, logprobs, entropy)
            result.loss.backward()
            del result, logprobs, entropy, batch
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim_config.max_grad_norm)
        self._stop_unless_finite(sums["loss"], grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals = dict(zip([*sums, "seen"], self._global_sum(*sums.values(), float(input_tokens))))
        return {
            "loss": totals["loss"],
            "entropy": totals["entropy"] / max(totals["tokens"], 1.0),
            "grad_norm": float(grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm),
            "loss_tokens": totals["tokens"],
            "trainer_tokens": totals["seen"],
            **update_statistics(self.loss, totals),
        }

    def _reference_logprobs(
        self, batch: TensorBatch, packed: PackedRow | None, shared: SharedPrefixBatch | None
    ) -> torch.Tensor | None:
        """The KL reference's log-probabilities of `batch` (None without a KL term)."""
        if self.ref_model is None or self.loss.kl_coef <= 0:
            return None
        with torch.no_grad():
            return self._logprobs(self.ref_model, batch, packed, shared, self.processing)[0]

    def _old_logprobs(self, index: int, logprobs: torch.Tensor, old_logprobs: list[torch.Tensor]) -> torch.Tensor | None:
        """Micro-batch `index`'s log-probabilities before the step's first update (kept by that update),
        which a sampler correction takes the ratio against; None without one."""
        if self.loss.sampler_correction == "none":
            return None
        if index == len(old_logprobs):
            old_logprobs.append(logprobs.detach())
        return old_logprobs[index]

    def _add_sums(
        self,
        sums: dict[str, float],
        result: LossResult,
        batch: TensorBatch,
        chunk: Sequence[Sample],
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
    ) -> None:
        """Add a micro-batch's statistics to its update's `sums`: the loss's, the entropy, and the gap
        between the sampler's log-probabilities and the trainer's on fresh and on stale samples."""
        mask = batch.loss_mask
        sums["loss"] += float(result.loss.detach())
        for name, value in result.sums().items():
            sums[name] += value
        with torch.no_grad():
            gap = (batch.inference_logprobs - logprobs.detach()) * mask
            fresh = torch.tensor([s.staleness == 0 for s in chunk], device=self.device)[:, None]
            sums["mismatch_kl"] += float((gap * fresh).sum())
            sums["fresh_tokens"] += float((mask * fresh).sum())
            sums["stale_kl"] += float((gap * ~fresh).sum())
            sums["entropy"] += float((entropy.detach() * mask).sum())
            sums["tokens"] += float(mask.sum())

    def _stop_unless_finite(self, loss: float, grad_norm: torch.Tensor | float) -> None:
        """Raise `TrainingDiverged` before the optimizer steps on a non-finite loss or gradient norm (every rank alike).

        The gradients are dropped, so the weights stay those of the last finite step.
        """
        (loss_total,) = self._global_sum(loss)
        norm = float(grad_norm.item() if isinstance(grad_norm, torch.Tensor) else grad_norm)
        if math.isfinite(loss_total) and math.isfinite(norm):
            return
        self.optimizer.zero_grad(set_to_none=True)
        raise TrainingDiverged(
            f"step {self.step + 1}: the loss ({loss_total:g}) or gradient norm ({norm:g}) is not finite; stopped before the "
            "optimizer step (the weights and checkpoints are those of the last finite step): lower optim.lr, or look for "
            "non-finite rewards or logprobs"
        )

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every weight, detached on the CPU: what a weight sync sends (with LoRA, the adapters merged in).

        Under FSDP2 this is a collective (every rank must call it) and only rank 0 gets the
        gathered weights; the other ranks get an empty dict.
        """
        if is_lora(self.model):
            return merged_state_dict(self.model)
        if is_sharded(self.model):
            gathered = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return {name: tensor for name, tensor in gathered.items() if isinstance(tensor, torch.Tensor)}
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.model.state_dict().items()}

    def whole_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's weights whole, one tensor at a time, in its own dtype: what a streamed weight sync sends.

        Under FSDP2 each tensor is gathered from the ranks' shards when it is reached (an all-gather:
        every rank must run this to the end, in the same order) and every rank gets it; dropping it
        before taking the next keeps one whole tensor per rank at a time, never a whole state dict.
        A tensor tied under several names is gathered once and yielded under each (consecutively).
        Not copied otherwise: a model that is not sharded yields its own tensors, detached.
        """
        names: dict[int, list[str]] = {}
        tensors: dict[int, torch.Tensor] = {}
        for name, tensor in self.model.state_dict(keep_vars=True).items():  # tied weights: one tensor, several names
            names.setdefault(id(tensor), []).append(name)
            tensors[id(tensor)] = tensor
        for key, tensor in tensors.items():
            with torch.no_grad():
                whole = (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()
            for name in names[key]:
                yield name, whole
            del whole

    def save(self, folder: Path) -> None:
        """The optimizer and schedule state (the model is saved by the caller, with its tokenizer).

        Under FSDP2 (a collective) each rank writes its own rows of the model and of the AdamW state to
        a file of its own (`write_shard`: nothing is gathered) and rank 0 writes ``trainer.json``. In one
        process ``trainer.pt`` holds the AdamW state keyed by parameter name, the schedule and the step.
        """
        if is_sharded(self.model):
            rank, world = dist.get_rank(), dist.get_world_size()
            write_shard(folder, self.model, self.optimizer, rank, world)
            if rank == 0:
                write_trainer_state(folder, self.step, self.optimizer, self.scheduler)
            return
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        optimizer = get_optimizer_state_dict(self.model, self.optimizer, options=options)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"optimizer": optimizer, "scheduler": self.scheduler.state_dict(), "step": self.step}, folder / "trainer.pt")

    def load(self, folder: Path) -> None:
        """Restore what `save` wrote: the optimizer's state (moments and step counts) and the step, never its settings.

        The model's weights must already be loaded. A sharded checkpoint is read per rank (each rank its
        own rows, `read_optimizer_shards`); ``trainer.pt`` is read as tensors and plain data only
        (``weights_only``): a checkpoint is data, never code. Its learning rate, betas, schedule and other
        settings must be the config's (`check_settings`): the optimizer keeps the config's, and the
        schedule is the config's, positioned at the checkpoint's step.

        Raises:
            ConfigError: the file holds anything else (a pickled object, a function), is not a trainer state,
                or records settings other than the config's.
        """
        if is_sharded_checkpoint(folder):
            path = folder / "trainer.json"
            step = self.check_settings(path, read_trainer_state_json(path))
            rank = dist.get_rank() if is_distributed() else 0
            read_optimizer_shards(ShardFiles(folder), self.model, self.optimizer, rank)
        else:
            path = folder / "trainer.pt"
            state = read_trainer_state(path)
            step = self.check_settings(path, state)
            optimizer = state["optimizer"]
            configured = self.optimizer.state_dict()["param_groups"]
            groups = [{**settings, "params": group["params"]} for settings, group in zip(configured, optimizer["param_groups"])]
            options = StateDictOptions(full_state_dict=True) if is_sharded(self.model) else None
            restored = {"state": optimizer["state"], "param_groups": groups}
            set_optimizer_state_dict(self.model, self.optimizer, restored, options=options)
        self.step = step
        self.scheduler = self._schedule(step)

    def check_settings(self, path: Path, state: dict[str, Any]) -> int:
        """`state`'s step, once its optimizer settings and schedule are found to be the config's (a checkpoint is
        outside data: it may restore where a run is, never change how it trains).

        Raises:
            ConfigError: one line naming the first setting that differs, or a part that is not what `save` writes.
        """
        step, optimizer, scheduler = state["step"], state["optimizer"], state["scheduler"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ConfigError(f"--resume: {path}: 'step' is not a non-negative integer")
        groups = optimizer.get("param_groups") if isinstance(optimizer, dict) else None
        if not isinstance(groups, list) or len(groups) != len(self.optimizer.param_groups):
            raise ConfigError(f"--resume: {path}: the optimizer's param groups are not the ones this config builds")
        if not isinstance(optimizer.get("state"), dict) or not all(
            isinstance(entry, dict) and set(entry) <= OPTIMIZER_STATE_KEYS for entry in optimizer["state"].values()
        ):
            raise ConfigError(f"--resume: {path}: the optimizer state holds more than {', '.join(sorted(OPTIMIZER_STATE_KEYS))}")
        recorded = [
            {key: _plain(group.get(key)) for key in OPTIMIZER_SETTINGS} if isinstance(group, dict) else {} for group in groups
        ]
        if not isinstance(scheduler, dict):
            raise ConfigError(f"--resume: {path}: 'scheduler' is not what v1 writes")
        differences = [
            (f"optimizer {key}", found.get(key), wanted[key])
            for found, wanted in zip(recorded, self.optimizer_settings())
            for key in OPTIMIZER_SETTINGS
            if found.get(key) != wanted[key]
        ]
        configured_lrs = [group["initial_lr"] for group in self.optimizer.param_groups]
        differences += [
            (f"schedule {key}", _plain(scheduler.get(key)), wanted)
            for key, wanted in (("base_lrs", _plain(configured_lrs)), ("last_epoch", step))
            if _plain(scheduler.get(key)) != wanted
        ]
        if differences:
            name, found, wanted = differences[0]
            raise ConfigError(
                f"--resume: {path}: {name} is {found!r:.60} in the checkpoint but {wanted!r:.60} in the config; a checkpoint "
                "restores the optimizer's state, never its settings: resume with the config that wrote it"
            )
        return step


def _plain(value: Any) -> Any:
    """`value` with tuples as lists and tensors as numbers, so a setting compares equal however it was stored."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


__all__ = [
    "PolicyTrainer",
    "TrainingDiverged",
    "current_rss_mb",
    "lr_factor",
    "pad_id_of",
    "read_trainer_state",
    "shard_with_fsdp2",
]
