"""`Engine`: continuous batching of generation requests over one transformers causal LM.

One scheduler thread owns the model. Each iteration it admits waiting requests
and prefills them together (one forward pass over their distinct prompts, left-padded,
at most `PREFILL_TOKEN_BUDGET` padded tokens per pass; the `n` choices of a request and
requests with the same prompt share a row), which samples each choice's first token; then
it runs ONE decoding step for every sequence in flight as a single batch, and retires the
finished ones. New requests therefore join a running batch at the next step instead of
waiting for it to drain, and a trainer's round of rollouts (many requests for the same few
prompts) costs a few prefill passes, not one per rollout.

The batch's KV cache is one tensor pair per layer, ``[batch, kv_heads, length, head_dim]``,
left-padded so that every row ends at the same column; an attention mask marks the
padding and each row has its own position ids. A joining sequence is padded on the
left to the batch's length (or the batch is padded to its length); retired rows are
dropped and columns that became padding in every row are trimmed.

Logprobs are those of the distribution sampled from (vLLM's ``processed_logprobs``): the
log-softmax of the logits divided by the temperature, after top-k and top-p filtering
(`v1.inference`); greedy requests (temperature 0) report the raw distribution's.
A trainer recomputes the same quantity with the same settings.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from v1._util.entropy import random_bits
from v1.inference._sampling import LogitProcessing, processed_logits, sample_from_logprobs

logger = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_SIZE = 64
PREFILL_TOKEN_BUDGET = 16384
"""Most tokens (rows x longest prompt, padding included) one prefill pass takes; a longer prompt gets a pass of its own."""
FILTERED_LOGPROB = -9999.0
"""What a top-logprob entry filtered out by top-k / top-p reports (JSON has no -inf)."""


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. `temperature == 0` is greedy."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    @property
    def processing(self) -> LogitProcessing:
        """The distribution these parameters sample from (greedy: the raw one)."""
        return LogitProcessing(self.temperature, self.top_p, self.top_k)


@dataclass
class TokenEvent:
    """What one choice produced in one step: new token ids, their logprobs, the text they add, and whether it ended."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str | None = None


@dataclass
class Sequence:
    """One choice of one request, while it is generated."""

    request: GenerationRequest
    index: int
    generator: torch.Generator
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted_text: int = 0
    finish_reason: str | None = None


@dataclass
class GenerationRequest:
    """A prompt's token ids, how to sample `n` choices from it, and where their events go.

    `on_event` is called from the engine thread, once per choice per step, and once
    more with `None` when every choice finished (or the request failed: then `error` is set).
    """

    prompt_ids: list[int]
    params: SamplingParams
    on_event: Callable[[TokenEvent | None], None]
    n: int = 1
    error: BaseException | None = None
    cancelled: bool = False


@dataclass
class EngineStats:
    """Counters of the engine's work since it started (read them to see batching happen)."""

    requests: int = 0
    prefills: int = 0
    decode_steps: int = 0
    decoded_tokens: int = 0
    max_batch_size: int = 0
    prompt_tokens: int = 0
    weight_updates: int = 0
    cancelled: int = 0
    prefill_passes: int = 0
    """Forward passes that prefilled admitted requests (`prefills` counts the distinct prompts they held)."""


FLASH_DTYPES = (torch.float16, torch.bfloat16)
"""The only dtypes flash-attn's kernels take."""


def run_float32_attention_without_flash(model: PreTrainedModel) -> None:
    """A model whose config asks for a flash-attention kernel but whose weights are float32 (the trainer's fp32
    master copy, which the engine runs without autocast) runs ``sdpa``, said in the log: flash-attn would refuse it."""
    implementation = str(getattr(model.config, "_attn_implementation", None) or "")
    dtype = next(model.parameters()).dtype
    if implementation.startswith("flash_attention") and dtype not in FLASH_DTYPES:
        logger.warning(
            "built-in engine: sdpa, not %s: flash-attn takes fp16/bf16 only and the served weights are %s", implementation, dtype
        )
        model.set_attn_implementation("sdpa")


class Engine:
    """Continuous-batching generation over `model` on its own thread.

    Args:
        model: a transformers causal LM (in eval mode; it is not copied).
        tokenizer: its tokenizer (for detokenization and stop strings).
        max_batch_size: most sequences decoded in one step; more requests wait.
        max_model_len: context length; defaults to the model config's `max_position_embeddings`.
        cpu_threads: torch's intra-op threads for the engine thread's CPU work (OpenMP's count is
            per thread, so the rest of the process, a trainer say, keeps its own). One is fastest
            for small models: a multi-threaded step of a tiny model mostly waits on its threads.
        on_step_end: called on the engine thread after each step's events were handed to the
            requests' `on_event` (and after a failure's): where a consumer that buffers events
            wakes its reader once per step instead of once per event.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_model_len: int | None = None,
        cpu_threads: int = 1,
        on_step_end: Callable[[], None] | None = None,
    ) -> None:
        self.model = model
        run_float32_attention_without_flash(model)
        self.on_step_end = on_step_end
        self.cpu_threads = cpu_threads
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_model_len = max_model_len or int(getattr(model.config, "max_position_embeddings", 2048))
        self.device = next(model.parameters()).device
        self.eos_token_ids = self._eos_ids()
        self.stats = EngineStats()
        self.weight_version = 0
        self._waiting: list[GenerationRequest] = []
        self._running: list[Sequence] = []
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        self._wake = threading.Condition()
        self._weights_lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def _eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return frozenset(ids)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler thread."""
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="v1-inference-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the scheduler thread; requests still in flight end with an error."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; it joins the running batch at the next step."""
        with self._wake:
            if self._stopping or self._thread is None:
                raise RuntimeError("the inference engine is not running")
            self._waiting.append(request)
            self._wake.notify()

    def cancel(self, request: GenerationRequest) -> None:
        """Stop generating for `request` (its client went away); it is retired at the next step."""
        request.cancelled = True

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Copy `state_dict` into the model between two decoding steps; the new weight version.

        Missing keys keep their values (a partial update); an unknown key or a shape
        mismatch raises `ValueError` and leaves the model unchanged. Sequences in flight
        continue with the new weights (their cached keys and values are not recomputed).
        """
        params = self.model.state_dict(keep_vars=True)  # tied weights appear under each of their names
        unknown = sorted(set(state_dict) - set(params))
        if unknown:
            raise ValueError(f"unknown weight names: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
        for name, tensor in state_dict.items():
            _check_shape(name, tensor, params[name])
        with self.updating_weights() as copy:
            for name, tensor in state_dict.items():
                copy(name, tensor)
        return self.weight_version

    @contextlib.contextmanager
    def updating_weights(self) -> Iterator[Callable[[str, torch.Tensor], None]]:
        """A weight update that arrives one tensor at a time: ``copy(name, tensor)`` for each, then the version advances once.

        Decoding waits until the update ends, so no step sees a mix of old and new weights; a tensor
        passed under each name of a tied weight is copied once. `copy` raises `ValueError` for an
        unknown name or a shape mismatch (the tensors copied before it stay).
        """
        params = self.model.state_dict(keep_vars=True)
        copied: set[tuple[Any, ...]] = set()  # (parameter, source memory): tied weights sent as one tensor copy once

        def copy(name: str, tensor: torch.Tensor) -> None:
            if name not in params:
                raise ValueError(f"unknown weight name: {name}")
            _check_shape(name, tensor, params[name])
            key = (id(params[name]), str(tensor.device), tensor.data_ptr(), tensor.stride())
            if key not in copied:
                copied.add(key)
                params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))

        with self._weights_lock, torch.no_grad():
            yield copy
            self.weight_version += 1
            self.stats.weight_updates += 1

    # -- the scheduler ---------------------------------------------------------------------

    def _run(self) -> None:
        torch.set_num_threads(self.cpu_threads)
        while True:
            with self._wake:
                while not self._stopping and not self._waiting and not self._running:
                    self._wake.wait()
                if self._stopping:
                    break
                room = self.max_batch_size - len(self._running)
                admitted: list[GenerationRequest] = []
                while self._waiting and (room >= self._waiting[0].n or (not self._running and not admitted)):
                    request = self._waiting.pop(0)
                    room -= request.n
                    admitted.append(request)
            try:
                with self._weights_lock, torch.inference_mode():
                    for chunk in _prefill_chunks(admitted):
                        self._prefill(chunk)
                    self._retire()
                    if self._running:
                        self._decode_step()
                        self._retire()
            except Exception as exc:  # a failed step fails the requests in it, never the engine
                logger.exception("inference step failed")
                self._fail_all(exc, admitted)
            self._step_ended()
        self._fail_all(RuntimeError("the inference engine stopped"))
        self._step_ended()

    def _step_ended(self) -> None:
        if self.on_step_end is not None:
            try:
                self.on_step_end()
            except Exception:  # a consumer's hook never stops the engine
                logger.exception("the inference engine's on_step_end hook failed")

    def _fail_all(self, error: BaseException, admitted: Iterable[GenerationRequest] = ()) -> None:
        """End every request in the engine with `error`: running, waiting, and `admitted` (taken off the queue for a
        prefill that failed before they joined the batch)."""
        with self._wake:
            waiting, self._waiting = self._waiting, []
        requests = {id(s.request): s.request for s in self._running}
        requests.update({id(r): r for r in [*admitted, *waiting]})
        self._running = []
        self._keys, self._values = [], []
        self._mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        for request in requests.values():
            request.error = error
            request.on_event(None)

    def _prefill(self, requests: list[GenerationRequest]) -> None:
        """One forward pass over the requests' distinct prompts (left-padded); every choice of every request joins the batch."""
        rows: dict[tuple[int, ...], int] = {}
        for request in requests:
            self.stats.requests += 1
            self.stats.prompt_tokens += len(request.prompt_ids)
            rows.setdefault(tuple(request.prompt_ids), len(rows))
        self.stats.prefills += len(rows)
        self.stats.prefill_passes += 1
        longest = max(len(prompt) for prompt in rows)
        input_ids = torch.tensor([[0] * (longest - len(p)) + list(p) for p in rows], dtype=torch.long, device=self.device)
        mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in rows], dtype=torch.long, device=self.device)
        position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
        output = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, past_key_values=DynamicCache(), use_cache=True
        )
        sequences = [sequence for request in requests for sequence in self._sequences(request)]
        index = torch.tensor([rows[tuple(s.request.prompt_ids)] for s in sequences], dtype=torch.long, device=self.device)
        cache = output.past_key_values
        keys = [layer.keys.index_select(0, index) for layer in cache.layers]
        values = [layer.values.index_select(0, index) for layer in cache.layers]
        self._join(sequences, keys, values, mask.index_select(0, index))
        self._sample(sequences, output.logits[:, -1, :].float().index_select(0, index))

    def _sequences(self, request: GenerationRequest) -> list[Sequence]:
        """The request's `n` choices, each with its own generator seeded from the request's seed (or a random one)."""
        base_seed = request.params.seed if request.params.seed is not None else random_bits(62)
        sequences = []
        for index in range(request.n):
            generator = torch.Generator(device=self.device)
            generator.manual_seed(base_seed + index)
            sequences.append(Sequence(request=request, index=index, generator=generator))
        return sequences

    def _join(self, sequences: list[Sequence], keys: list[torch.Tensor], values: list[torch.Tensor], mask: torch.Tensor) -> None:
        if not self._running:
            self._keys, self._values, self._mask = [k.contiguous() for k in keys], [v.contiguous() for v in values], mask
            self._running = list(sequences)
            return
        current, joining = self._mask.shape[1], mask.shape[1]
        if joining < current:
            keys = [_pad_left(k, current - joining, dim=2) for k in keys]
            values = [_pad_left(v, current - joining, dim=2) for v in values]
            mask = _pad_left(mask, current - joining, dim=1)
        elif joining > current:
            self._keys = [_pad_left(k, joining - current, dim=2) for k in self._keys]
            self._values = [_pad_left(v, joining - current, dim=2) for v in self._values]
            self._mask = _pad_left(self._mask, joining - current, dim=1)
        self._keys = [torch.cat([a, b]) for a, b in zip(self._keys, keys)]
        self._values = [torch.cat([a, b]) for a, b in zip(self._values, values)]
        self._mask = torch.cat([self._mask, mask])
        self._running.extend(sequences)

    def _decode_step(self) -> None:
        batch = len(self._running)
        self.stats.decode_steps += 1
        self.stats.decoded_tokens += batch
        self.stats.max_batch_size = max(self.stats.max_batch_size, batch)
        input_ids = torch.tensor([[s.output_ids[-1]] for s in self._running], dtype=torch.long, device=self.device)
        position_ids = self._mask.sum(dim=1, keepdim=True)
        attention_mask = torch.cat([self._mask, torch.ones(batch, 1, dtype=torch.long, device=self.device)], dim=1)
        cache = DynamicCache(ddp_cache_data=list(zip(self._keys, self._values)))
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        self._keys = [layer.keys for layer in output.past_key_values.layers]
        self._values = [layer.values for layer in output.past_key_values.layers]
        self._mask = attention_mask
        self._sample(list(self._running), output.logits[:, -1, :].float())

    def _sample(self, sequences: list[Sequence], logits: torch.Tensor) -> None:
        """Each sequence's next token, sampled for the whole batch at once (greedy rows take the argmax)."""
        rows_by_processing: dict[LogitProcessing, list[int]] = {}
        for row, sequence in enumerate(sequences):
            rows_by_processing.setdefault(sequence.request.params.processing, []).append(row)
        all_logprobs = torch.empty_like(logits)
        for processing, rows in rows_by_processing.items():  # usually one: every row samples alike
            index = torch.tensor(rows, device=logits.device)
            all_logprobs[index] = torch.log_softmax(processed_logits(logits[index], processing), dim=-1)
        tokens = logits.argmax(dim=-1)
        sampled = [row for row, sequence in enumerate(sequences) if sequence.request.params.temperature != 0]
        if sampled:
            uniforms = torch.cat(
                [torch.rand(1, generator=sequences[row].generator, device=logits.device, dtype=torch.float64) for row in sampled]
            )
            index = torch.tensor(sampled, device=logits.device)
            tokens[index] = sample_from_logprobs(all_logprobs[index], uniforms)
        chosen = all_logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
        for row, (sequence, token) in enumerate(zip(sequences, tokens.tolist())):
            top: list[tuple[int, float]] = []
            if sequence.request.params.top_logprobs:
                logprobs = all_logprobs[row]
                values, ids = torch.topk(logprobs, min(sequence.request.params.top_logprobs, logprobs.shape[-1]))
                top = list(zip(ids.tolist(), values.clamp(min=FILTERED_LOGPROB).tolist()))
            self._append(sequence, token, chosen[row], top)

    def _append(self, sequence: Sequence, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        params = sequence.request.params
        sequence.output_ids.append(token)
        prompt_length = len(sequence.request.prompt_ids)
        is_eos = (not params.ignore_eos and token in self.eos_token_ids) or token in params.stop_token_ids
        text = str(self.tokenizer.decode(sequence.output_ids, skip_special_tokens=params.skip_special_tokens))
        finish: str | None = None
        if params.stop:
            found = _find_stop(text, params.stop, sequence.emitted_text)
            if found is not None:
                start, stop = found
                text = text[: stop if params.include_stop_str_in_output else start]
                finish = "stop"
        if finish is None and is_eos:
            finish = "stop"
        if finish is None and (
            len(sequence.output_ids) >= params.max_tokens or prompt_length + len(sequence.output_ids) >= self.max_model_len
        ):
            finish = "length"
        if finish is None and text.endswith("\ufffd"):
            new_text = ""  # an incomplete UTF-8 sequence: wait for the bytes that complete it
        else:
            hold = _partial_stop_length(text, params.stop) if finish is None else 0
            new_text = text[sequence.emitted_text : len(text) - hold]
            sequence.emitted_text += len(new_text)
        sequence.text = text
        sequence.finish_reason = finish
        sequence.request.on_event(
            TokenEvent(
                index=sequence.index,
                token_ids=[token],
                logprobs=[logprob],
                top_logprobs=[top] if params.top_logprobs else [],
                text=new_text,
                finish_reason=finish,
            )
        )

    def _retire(self) -> None:
        keep = [i for i, s in enumerate(self._running) if s.finish_reason is None and not s.request.cancelled]
        if len(keep) == len(self._running):
            return
        kept = set(keep)
        finished = [s for i, s in enumerate(self._running) if i not in kept]
        self.stats.cancelled += sum(1 for s in finished if s.finish_reason is None)
        if keep:
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self._keys = [k.index_select(0, index) for k in self._keys]
            self._values = [v.index_select(0, index) for v in self._values]
            self._mask = self._mask.index_select(0, index)
            self._running = [self._running[i] for i in keep]
            padding = int((self._mask.cumsum(dim=1) == 0).sum(dim=1).min())
            if padding:
                self._keys = [k[:, :, padding:] for k in self._keys]
                self._values = [v[:, :, padding:] for v in self._values]
                self._mask = self._mask[:, padding:]
        else:
            self._running, self._keys, self._values = [], [], []
            self._mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)
        still_running = {id(s.request) for s in self._running}
        for request in {id(s.request): s.request for s in finished}.values():
            if id(request) not in still_running:
                request.on_event(None)


def _check_shape(name: str, tensor: torch.Tensor, param: torch.Tensor) -> None:
    if tuple(tensor.shape) != tuple(param.shape):
        raise ValueError(f"{name}: shape {tuple(tensor.shape)} does not match the model's {tuple(param.shape)}")


def _prefill_chunks(requests: list[GenerationRequest]) -> list[list[GenerationRequest]]:
    """`requests` in order, cut so that no pass exceeds `PREFILL_TOKEN_BUDGET` padded tokens (each pass takes at least one)."""
    chunks: list[list[GenerationRequest]] = []
    longest = 0
    for request in requests:
        grown = max(longest, len(request.prompt_ids))
        if chunks and grown * (len(chunks[-1]) + 1) <= PREFILL_TOKEN_BUDGET:
            chunks[-1].append(request)
            longest = grown
        else:
            chunks.append([request])
            longest = len(request.prompt_ids)
    return chunks


def _pad_left(tensor: torch.Tensor, amount: int, *, dim: int) -> torch.Tensor:
    shape = list(tensor.shape)
    shape[dim] = amount
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _find_stop(text: str, stops: tuple[str, ...], start: int) -> tuple[int, int] | None:
    """The earliest stop string in `text` that ends after `start - longest stop` (earlier text was checked already)."""
    best: tuple[int, int] | None = None
    for stop in stops:
        position = text.find(stop, max(0, start - len(stop)))
        if position >= 0 and (best is None or position < best[0]):
            best = (position, position + len(stop))
    return best


def _partial_stop_length(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters could be the start of a stop string (held back from streaming)."""
    longest = 0
    for stop in stops:
        for length in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:length]):
                longest = max(longest, length)
                break
    return longest


def engine_info(engine: Engine) -> dict[str, Any]:
    """The engine's counters and settings as JSON."""
    return {**asdict(engine.stats), "weight_version": engine.weight_version, "max_model_len": engine.max_model_len}


__all__ = ["DEFAULT_MAX_BATCH_SIZE", "Engine", "EngineStats", "GenerationRequest", "SamplingParams", "TokenEvent", "engine_info"]
