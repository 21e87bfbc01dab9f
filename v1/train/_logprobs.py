"""Log-probabilities of sampled tokens under the model, as the inference server reports them.

The vocabulary-wide part (output head, log-softmax over the processed logits) runs on
`LOGPROB_CHUNK_TOKENS` positions at a time and is recomputed in the backward pass, so no
``[B, T, V]`` tensor is kept for autograd, and only where the loss reads. `shared_prefix_logprobs`
computes the same values with each distinct prefix of a micro-batch run once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method
from torch.utils.checkpoint import checkpoint
from transformers.cache_utils import DynamicCache, DynamicLayer

from v1.inference import LogitProcessing, entropy_of, processed_logits
from v1.train._lora import is_lora
from v1.train._shared_prefix import SharedPrefixBatch

LOGPROB_CHUNK_TOKENS = 256
"""Positions whose vocabulary-wide logits exist at once when log-probabilities are computed."""

FINAL_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Model config fields that change logits after the output head: such models go through their own forward."""


DECODER_METHOD = "v1_decoder"
"""The method `register_decoder` gives a sharded model: its decoder body, run under the root's FSDP2 hooks."""


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` is sharded with FSDP2 (whatever the world size, one rank included)."""
    return isinstance(model, FSDPModule)


def decoder_parts(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The model's decoder body and output head modules when logits are exactly ``head(body(...))``, else None."""
    if is_lora(model):  # peft adapts the wrapped model's layers in place: its body and head are the LoRA model's
        model = cast(Any, model).get_base_model()
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) for name in FINAL_LOGIT_TRANSFORMS):
        return None
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    body = getattr(model, "base_model", None)
    if head is None or body is None or body is model:
        return None
    return body, head


def register_decoder(model: torch.nn.Module) -> None:
    """Let `output_head` run a sharded model's body and head apart (call after the root's `fully_shard`).

    The root unit holds what no decoder layer does (embedding, final norm, output head, tied or
    not): its FSDP2 pre-forward hook gathers them and, the root being kept unsharded after
    forward until its post-backward, the head can run chunk by chunk (and again when a chunk is
    recomputed in backward). The body runs through `DECODER_METHOD`, which FSDP2 wraps in the
    root's hooks as it does the root's forward.
    """
    parts = decoder_parts(model)
    if parts is None or not is_sharded(model):
        return
    setattr(model, DECODER_METHOD, parts[0].__call__)
    register_fsdp_forward_method(model, DECODER_METHOD)


def output_head(model: torch.nn.Module) -> tuple[Callable[..., Any], torch.nn.Module] | None:
    """What runs the decoder body and the output head when logits are exactly ``head(body(...))``, else None.

    A sharded model's body runs under its root's FSDP2 hooks (`register_decoder`); one sharded
    without that registration runs its own forward.
    """
    parts = decoder_parts(model)
    if parts is None or not is_sharded(model):
        return parts
    run = getattr(model, DECODER_METHOD, None)
    return (run, parts[1]) if run is not None else None


def chunk_logprobs(
    states: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module | None, processing: LogitProcessing
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of `targets` and (without grad) the entropies, for ``[N, H]`` hidden states (or ``[N, V]`` logits)."""
    logits = (head(states) if head is not None else states).float()
    log_probs = torch.log_softmax(processed_logits(logits, processing, keep=targets), dim=-1)
    with torch.no_grad():
        entropy = entropy_of(log_probs.detach())
    return log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    targets: torch.Tensor,
    processing: LogitProcessing = LogitProcessing(),
    *,
    position_ids: torch.Tensor | None = None,
    where: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of `targets` (``input_ids[:, 1:]``) and the entropy of each prediction, both ``[B, T-1]``.

    Both are of the sampling distribution `processing` describes (logits / temperature, top-k,
    top-p), as the inference server reports them. The vocabulary-wide part runs on
    `LOGPROB_CHUNK_TOKENS` positions at a time and is recomputed in the backward pass, so no
    ``[B, T, V]`` log-softmax is kept for autograd; the entropy never has a graph. With `where` (a
    boolean ``[B, T-1]``, e.g. the loss mask) the output head runs on those positions only (a
    prompt's predictions are never trained on) and both outputs are 0 elsewhere.
    """
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids, "use_cache": False}
    parts = output_head(model)
    head: torch.nn.Module | None = None
    if parts is None:
        states = model(**inputs).logits[:, :-1]
    else:
        body, head = parts
        states = body(**inputs).last_hidden_state[:, :-1]
    return logprobs_at(states.reshape(-1, states.shape[-1]), targets, head, processing, where)


def logprobs_at(
    flat_states: torch.Tensor,
    targets: torch.Tensor,
    head: torch.nn.Module | None,
    processing: LogitProcessing,
    where: torch.Tensor | None = None,
    index: torch.Tensor | None = None,
    shape: torch.Size | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities and entropies of `targets` from ``[M, H]`` hidden states (or ``[M, V]`` logits), one per target.

    With `where` (boolean, `targets`' shape) only those predictions run the head; the others are
    0. The results have `targets`' shape, or with `index` (flat positions, `targets`' shape) and
    `shape`, the predictions at `where` land at their `index` in a zero tensor of `shape`.
    """
    flat_targets = targets.reshape(-1)
    selected = where.reshape(-1).nonzero().squeeze(-1) if where is not None and bool(where.any()) else None
    if selected is not None:
        flat_states, flat_targets = flat_states[selected], flat_targets[selected]
    chosen, entropies = [], []
    for start in range(0, flat_targets.shape[0], LOGPROB_CHUNK_TOKENS):
        piece = slice(start, start + LOGPROB_CHUNK_TOKENS)
        args = (flat_states[piece], flat_targets[piece], head, processing)
        if torch.is_grad_enabled() and flat_states.requires_grad:
            part, entropy = checkpoint(chunk_logprobs, *args, use_reentrant=False)
        else:
            part, entropy = chunk_logprobs(*args)
        chosen.append(part)
        entropies.append(entropy)
    out_shape = shape if shape is not None else targets.shape
    if selected is None and index is None:
        return torch.cat(chosen).view(out_shape), torch.cat(entropies).view(out_shape)
    positions = torch.arange(targets.numel(), device=targets.device) if selected is None else selected
    if index is not None:
        positions = index.reshape(-1)[positions]
    at_selected, entropy_at_selected = torch.cat(chosen), torch.cat(entropies)
    size = math.prod(out_shape)
    logprobs = at_selected.new_zeros(size).index_copy(0, positions, at_selected)
    entropy = entropy_at_selected.new_zeros(size).index_copy(0, positions, entropy_at_selected)
    return logprobs.view(out_shape), entropy.view(out_shape)


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def activation_checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes activations in backward (transformers then returns no cache)."""
    flag = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5.23; the older name warns there
    return bool(getattr(model, "is_gradient_checkpointing", False) if flag is None else flag)


def reusable_cache(cache: object) -> bool:
    """Whether a prefix pass's cache can be gathered per sample and extended: full attention, nothing windowed or quantized."""
    return isinstance(cache, DynamicCache) and all(type(layer) is DynamicLayer for layer in cache.layers)


def gather_for_cache_gradients(model: torch.nn.Module, cache: DynamicCache) -> None:
    """Under FSDP2, gather each decoder layer's weights again when gradients reach its prefix keys/values.

    FSDP2 gathers a layer's weights for backward when gradients reach the layer's outputs; a prefix
    pass's keys and values leave the layer through the cache instead, and their gradients come
    after the suffix pass's backward has already freed the gathered weights. The layer's
    post-backward for the prefix pass then reduces those gradients and frees them again.
    """
    parts = decoder_parts(model)
    layers = getattr(parts[0], "layers", None) if parts is not None else None
    if not is_sharded(model) or not torch.is_grad_enabled() or layers is None:
        return
    for layer, layer_cache in zip(layers, cache.layers, strict=True):
        if not isinstance(layer, FSDPModule):
            continue
        for tensor in (getattr(layer_cache, "keys", None), getattr(layer_cache, "values", None)):
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(lambda grad, layer=layer: layer.unshard())


def shared_prefix_logprobs(
    model: torch.nn.Module, batch: SharedPrefixBatch, processing: LogitProcessing = LogitProcessing()
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`token_logprobs` at `batch`'s loss positions, in the padded ``[N, width]`` layout, each prefix run once.

    None when the model cannot run this way: logits not exactly ``head(body(...))``, a cache
    that is not plain full attention, or none at all (gradient checkpointing turns it off).
    """
    parts = output_head(model)
    if parts is None or activation_checkpointing(model):
        return None
    body, head = parts
    cache = body(input_ids=batch.prefix_ids, attention_mask=batch.prefix_mask, use_cache=True).past_key_values
    if not reusable_cache(cache):
        return None
    gather_for_cache_gradients(model, cache)
    cache.reorder_cache(batch.owner)
    states = body(
        input_ids=batch.suffix_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state[:, :-1]
    shape = torch.Size((batch.suffix_ids.shape[0], batch.width))
    return logprobs_at(states.reshape(-1, states.shape[-1]), batch.targets, head, processing, batch.where, batch.index, shape)


__all__ = [
    "DECODER_METHOD",
    "FINAL_LOGIT_TRANSFORMS",
    "LOGPROB_CHUNK_TOKENS",
    "activation_checkpointing",
    "chunk_logprobs",
    "decoder_parts",
    "is_distributed",
    "is_sharded",
    "logprobs_at",
    "output_head",
    "register_decoder",
    "reusable_cache",
    "shared_prefix_logprobs",
    "token_logprobs",
]
