"""`InferenceServer`: an OpenAI-compatible HTTP server over a transformers causal LM, with continuous batching.

Routes (aiohttp):

- ``POST /v1/chat/completions`` and ``POST /v1/chat/completions/tokens`` (the vLLM-style token
  route; it may take the prompt as token ids in `tokens`): chat template applied with the
  tokenizer, sampling args, `logprobs`/`top_logprobs`, `return_token_ids` (the answer carries
  `prompt_token_ids` and each choice's `token_ids`, as vLLM returns them), `n`, streaming,
  Hermes-style tool calls;
- ``POST /v1/completions``: text or token-id prompts (one or a list), `logprobs` as an int;
- ``GET /v1/models``, ``GET /health``, ``GET /stats`` (the engine's counters);
- ``POST /update_weights`` with ``{"path": DIR}``: load a checkpoint directory's weights.

A trainer in the same process calls `load_weights(state_dict)` instead, and the server serves its
origin in process (`v1.clients`): v1's upstream clients on the server's event loop get
whole chat and completions answers without a socket (`handle_async_request`), HTTP all the same;
the interception endpoint still sees and records every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from aiohttp import web
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from v1._util import bounded_json as _bounded_json
from v1._util.entropy import uuid4_hex
from v1.clients import TOKEN_FIELDS as NEMO_TOKEN_FIELDS
from v1.clients import (
    bridge_prompt_ids,
    parse_tool_calls,
    render_text,
    serve_in_process,
    stop_serving,
    text_digest,
    whole_response,
)
from v1.inference._engine import DEFAULT_MAX_BATCH_SIZE, Engine, GenerationRequest, SamplingParams, TokenEvent, engine_info
from v1.inference._loop_inbox import LoopInbox
from v1.inference._prompt_cache import PromptCache
from v1.inference._protocol import (
    ChatRequest,
    CompletionRequest,
    GenerationFields,
    RequestError,
    parse_request,
)
from v1.inference._request_seeds import RequestSeeds
from v1.inference._weights import load_state_dict
from v1.interception import openai_error_body, sse

DEFAULT_MAX_N = 16
ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 503: "service_unavailable"}


@dataclass
class Choice:
    """One choice's output so far."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None

    def add(self, event: TokenEvent) -> None:
        self.token_ids.extend(event.token_ids)
        self.logprobs.extend(event.logprobs)
        self.top_logprobs.extend(event.top_logprobs)
        self.text += event.text
        self.finish_reason = event.finish_reason or self.finish_reason


@dataclass
class Generation:
    """The prompts of one HTTP request in the engine; events arrive on `queue` as ``(choice index, event)``."""

    prompts: list[list[int]]
    n: int
    queue: asyncio.Queue[tuple[int, TokenEvent | None]]
    requests: list[GenerationRequest] = field(default_factory=list)


class InferenceServer:
    """Serve `model` with `tokenizer` over OpenAI-compatible HTTP on loopback.

    Use as ``async with InferenceServer(model, tokenizer) as server: server.url`` (the base
    URL, ending in ``/v1``), or from sync code with `serve_in_thread`.

    Args:
        model: a transformers causal LM; it is put in eval mode and used in place (not copied).
        tokenizer: its tokenizer, with a chat template for the chat routes.
        model_name: the name clients send as `model`; others get 404.
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        max_batch_size: most sequences decoded in one batched step.
        max_model_len: the context length; defaults to the model's `max_position_embeddings`.
        max_n: the largest `n` a request may ask for.
        cpu_threads: torch threads for the engine's CPU work (see `Engine`).
        nemo_token_fields: answer chat with NeMo-RL's message-level token ids too
            (`message.prompt_token_ids`, `generation_token_ids`, `generation_log_probs`), as
            NeMo Gym's `vllm_model` does with `return_token_id_information`.
        seed: makes sampling reproducible across runs: a request without its own `seed` gets one
            from `RequestSeeds` (the k-th rollout of a prompt samples alike in every run, whatever
            order concurrent requests arrive in). None: a random seed per request.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_model_len: int | None = None,
        max_n: int = DEFAULT_MAX_N,
        cpu_threads: int = 1,
        nemo_token_fields: bool = False,
        seed: int | None = None,
    ) -> None:
        seeds = RequestSeeds(seed) if seed is not None else None  # refuses a seed out of range first
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name or getattr(model.config, "name_or_path", None) or "tiny"
        self.host = host
        self.port = port
        self.max_n = max_n
        self.nemo_token_fields = nemo_token_fields
        self._inboxes: dict[asyncio.AbstractEventLoop, LoopInbox] = {}
        self.engine = Engine(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
            cpu_threads=cpu_threads,
            on_step_end=self._flush_events,
        )
        self._runner: web.AppRunner | None = None
        self._created = int(time.time())
        self.in_process_requests = 0
        """Whole answers given in process (`handle_async_request`), without a socket."""
        self.prompts = PromptCache()
        """Chat prompts' token ids, rendered once per distinct prompt."""
        self._token_texts: dict[int, str] = {}
        self._seeds = seeds

    def _flush_events(self) -> None:
        """The engine's step ended: wake each loop with requests in flight once for the step's events."""
        for inbox in list(self._inboxes.values()):
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to read them
                inbox.flush()

    @property
    def url(self) -> str:
        """The base URL clients use (``http://host:port/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def stats(self) -> dict[str, Any]:
        """The engine's counters (requests, prefills, decode steps, largest batch, weight version, ...)."""
        return {**engine_info(self.engine), "prompt_cache_hits": self.prompts.hits, "prompt_cache_misses": self.prompts.misses}

    @property
    def weight_version(self) -> int:
        """How many weight updates the server has applied."""
        return self.engine.weight_version

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Copy `state_dict` into the served model between two decoding steps; the new weight version.

        Thread-safe; blocks for at most one decoding step. Missing keys keep their values;
        unknown names or shapes raise `ValueError` with the model unchanged.
        """
        return self.engine.load_weights(state_dict)

    async def start(self) -> None:
        """Start the engine and bind the HTTP server."""
        self.engine.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/chat/completions/tokens", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/update_weights", self._update_weights)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        serve_in_process(self.url, self)

    async def close(self) -> None:
        """Stop serving; requests in flight end with an error."""
        stop_serving(self.url, self)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.to_thread(self.engine.stop)  # its last flush delivers the failures of requests in flight

    async def __aenter__(self) -> InferenceServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # -- routes ----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "created": self._created,
                        "owned_by": "v1",
                        "max_model_len": self.engine.max_model_len,
                    }
                ],
            }
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def _update_weights(self, request: web.Request) -> web.Response:
        try:
            body = _bounded_json.loads(await request.read(), "the request body")
        except ValueError as exc:
            return _error(RequestError(str(exc)))
        path = body.get("path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path:
            return _error(RequestError('expected {"path": "<checkpoint directory>"}', param="path"))
        try:
            state_dict = await asyncio.to_thread(load_state_dict, Path(path))
            version = await asyncio.to_thread(self.load_weights, state_dict)
        except (FileNotFoundError, ValueError) as exc:
            return _error(RequestError(str(exc), param="path"))
        return web.json_response({"status": "ok", "weight_version": version, "tensors": len(state_dict)})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body: ChatRequest = parse_request(await request.read(), ChatRequest)
            prompt_ids, generation = await self._submit_chat(body)
        except RequestError as exc:
            return _error(exc)
        if body.stream:
            return await self._stream(request, generation, body, chat=True, tools=_wants_tools(body))
        return _json(*await self._chat_answer(body, prompt_ids, generation))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body: CompletionRequest = parse_request(await request.read(), CompletionRequest)
            generation = await self._submit_completions(body)
        except RequestError as exc:
            return _error(exc)
        if body.stream:
            return await self._stream(request, generation, body, chat=False, tools=False)
        return _json(*await self._completions_answer(body, generation))

    async def handle_async_request(self, request: Any) -> Any | None:
        """The server's in-process entry (`v1.clients._in_process.InProcessApp`): a request of the HTTP library in,
        its `Response` out; None (sent over the network) for a stream or a route other than chat and completions."""
        if request.method != "POST" or not request.url.path.startswith("/v1/"):
            return None
        answered = await self.answer_in_process(request.url.path.removeprefix("/v1"), await request.aread())
        if answered is None:
            return None
        status, body = answered
        return whole_response(status, {"content-type": "application/json"}, json.dumps(body).encode())

    async def answer_in_process(self, path: str, raw: bytes) -> tuple[int, Any] | None:
        """A whole chat or completions answer without HTTP: ``(status, JSON body)``.

        The same validation, generation and answer as the HTTP routes; None for a stream or
        another path (the caller sends those over HTTP).
        """
        chat = path in ("/chat/completions", "/chat/completions/tokens")
        if not chat and path != "/completions":
            return None
        try:
            if chat:
                chat_body: ChatRequest = parse_request(raw, ChatRequest)
                if chat_body.stream:
                    return None
                self.in_process_requests += 1
                prompt_ids, generation = await self._submit_chat(chat_body)
                return await self._chat_answer(chat_body, prompt_ids, generation)
            body: CompletionRequest = parse_request(raw, CompletionRequest)
            if body.stream:
                return None
            self.in_process_requests += 1
            return await self._completions_answer(body, await self._submit_completions(body))
        except RequestError as exc:
            return _error_answer(exc)

    async def _submit_chat(self, body: ChatRequest) -> tuple[list[int], Generation]:
        self._check_model(body)
        if body.tokens is not None:
            prompt_ids = body.tokens
        else:
            prompt_ids = await self.prompts.ids(_prompt_key(body), lambda: self._render_chat(body))
        top = (body.top_logprobs or 0) if body.logprobs else 0
        return prompt_ids, self._submit([prompt_ids], body, top, default_max_tokens=None)

    async def _submit_completions(self, body: CompletionRequest) -> Generation:
        self._check_model(body)
        prompts = await asyncio.to_thread(self._completion_prompts, body.prompt)
        return self._submit(prompts, body, body.logprobs or 0, default_max_tokens=16)

    async def _chat_answer(self, body: ChatRequest, prompt_ids: list[int], generation: Generation) -> tuple[int, Any]:
        try:
            choices = await self._collect(generation)
        except RuntimeError as exc:
            return _error_answer(RequestError(str(exc), status=503))
        return 200, self._chat_body(body, prompt_ids, choices, _wants_tools(body))

    async def _completions_answer(self, body: CompletionRequest, generation: Generation) -> tuple[int, Any]:
        try:
            choices = await self._collect(generation)
        except RuntimeError as exc:
            return _error_answer(RequestError(str(exc), status=503))
        return 200, self._completion_body(body, generation, choices)

    # -- request handling ------------------------------------------------------------------

    def _check_model(self, body: GenerationFields) -> None:
        if body.model is not None and body.model != self.model_name:
            raise RequestError(
                f"the model {body.model!r} does not exist; this server serves {self.model_name!r}",
                status=404,
                code="model_not_found",
                param="model",
            )
        if body.n > self.max_n:
            raise RequestError(f"n: at most {self.max_n} choices per request, got {body.n}", param="n")

    def _render_chat(self, body: ChatRequest) -> list[int]:
        """The prompt ids: the template's, or (NeMo-RL style) extending the ids the last assistant message carries."""
        for index, message in enumerate(body.messages):
            if not isinstance(message.get("role"), str):
                raise RequestError(f"messages[{index}]: every message needs a string role", param=f"messages[{index}]")
        messages = [{k: v for k, v in m.items() if k not in NEMO_TOKEN_FIELDS} for m in body.messages]
        template_kwargs = dict(body.chat_template_kwargs or {})
        if body.continue_final_message or not body.add_generation_prompt:
            text = self._apply_template(
                messages,
                body,
                add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                continue_final_message=body.continue_final_message,
                **template_kwargs,
            )
            return self._ids(text, add_special_tokens=False)
        carried = self._carried_token_ids(body.messages)
        try:
            if carried is not None:
                index, prompt_ids, completion_ids = carried
                bridged = bridge_prompt_ids(
                    self.tokenizer, messages, body.tools, messages[:index], prompt_ids, completion_ids, **template_kwargs
                )
                if bridged is not None:
                    return bridged
            return self._ids(render_text(self.tokenizer, messages, body.tools, **template_kwargs), add_special_tokens=False)
        except Exception as exc:  # a template error is the request's fault (roles, content shape)
            raise RequestError(f"cannot apply the chat template to these messages: {type(exc).__name__}: {exc}") from None

    def _apply_template(self, messages: list[dict[str, Any]], body: ChatRequest, **kwargs: Any) -> str:
        try:
            return str(self.tokenizer.apply_chat_template(messages, tools=body.tools, tokenize=False, **kwargs))  # type: ignore[arg-type]
        except Exception as exc:  # a template error is the request's fault (roles, content shape)
            raise RequestError(f"cannot apply the chat template to these messages: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _carried_token_ids(messages: list[dict[str, Any]]) -> tuple[int, list[int], list[int]] | None:
        """The last assistant message's own token ids (NeMo-RL's `prompt_token_ids` + `generation_token_ids`), if it carries them."""
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.get("role") != "assistant":
                continue
            prompt_ids, completion_ids = message.get("prompt_token_ids"), message.get("generation_token_ids")
            if _int_list(prompt_ids) and _int_list(completion_ids) is not None:
                return index, list(prompt_ids), list(completion_ids)  # type: ignore[arg-type]
            return None
        return None

    def _completion_prompts(self, prompt: str | list[int] | list[str | list[int]]) -> list[list[int]]:
        if isinstance(prompt, str):
            return [self._encode(prompt)]
        if not prompt:
            raise RequestError("prompt must not be empty", param="prompt")
        if all(isinstance(p, int) for p in prompt):
            return [[int(p) for p in prompt]]  # type: ignore[arg-type]
        prompts: list[list[int]] = []
        for entry in prompt:
            if isinstance(entry, int):
                raise RequestError("prompt: a list of prompts cannot mix token ids and prompts", param="prompt")
            prompts.append(self._encode(entry) if isinstance(entry, str) else list(entry))
        return prompts

    def _encode(self, text: str) -> list[int]:
        return self._ids(text, add_special_tokens=True)

    def _ids(self, text: str, *, add_special_tokens: bool) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        return list(ids)

    def _submit(
        self, prompts: list[list[int]], body: GenerationFields, top_logprobs: int, default_max_tokens: int | None
    ) -> Generation:
        limit = self.engine.max_model_len
        vocab = len(self.tokenizer)
        for prompt in prompts:
            if not prompt:
                raise RequestError("the prompt has no tokens", param="prompt")
            if any(not 0 <= token < vocab for token in prompt):
                raise RequestError(f"prompt token ids must be in [0, {vocab})", param="prompt")
            requested = body.requested_max_tokens()
            wanted = requested or default_max_tokens or 1
            if len(prompt) + wanted > limit or len(prompt) >= limit:
                raise RequestError(
                    f"This model's maximum context length is {limit} tokens. However, you requested "
                    f"{len(prompt) + wanted} tokens ({len(prompt)} in the prompt, {wanted} in the completion). "
                    "Please reduce the length of the messages or completion.",
                    code="context_length_exceeded",
                    param="messages",
                )
        loop = asyncio.get_running_loop()
        inbox = self._inboxes.get(loop) or self._inboxes.setdefault(loop, LoopInbox(loop))
        generation = Generation(prompts=prompts, n=body.n, queue=asyncio.Queue())
        for position, prompt in enumerate(prompts):
            max_tokens = body.requested_max_tokens() or default_max_tokens or limit - len(prompt)
            params = body.sampling_params(min(max_tokens, limit - len(prompt)), top_logprobs)
            if params.seed is None and self._seeds is not None:
                params = dataclasses.replace(params, seed=self._seeds.next(prompt, body.n, self.engine.weight_version))
            generation.requests.append(self._engine_request(prompt, params, body.n, position * body.n, generation, inbox))
        try:
            for engine_request in generation.requests:
                self.engine.submit(engine_request)
        except RuntimeError as exc:
            raise RequestError(str(exc), status=503) from None
        return generation

    @staticmethod
    def _engine_request(
        prompt: list[int], params: SamplingParams, n: int, offset: int, generation: Generation, inbox: LoopInbox
    ) -> GenerationRequest:
        def deliver(event: TokenEvent | None) -> None:
            inbox.put(generation.queue, (offset + (event.index if event else 0), event))

        return GenerationRequest(prompt_ids=prompt, params=params, on_event=deliver, n=n)

    async def _events(self, generation: Generation) -> AsyncGenerator[tuple[int, TokenEvent], None]:
        """The generation's events as they come; raises `RuntimeError` if the engine failed it."""
        pending = len(generation.requests)
        try:
            while pending:
                index, event = await generation.queue.get()
                if event is None:
                    pending -= 1
                    continue
                yield index, event
        finally:
            for engine_request in generation.requests:
                self.engine.cancel(engine_request)
        errors = [r.error for r in generation.requests if r.error is not None]
        if errors:
            raise RuntimeError(f"generation failed: {errors[0]}")

    async def _collect(self, generation: Generation) -> list[Choice]:
        choices = [Choice() for _ in range(len(generation.prompts) * generation.n)]
        async with contextlib.aclosing(self._events(generation)) as events:
            async for index, event in events:
                choices[index].add(event)
        return choices

    # -- answers ---------------------------------------------------------------------------

    def _token_text(self, token: int) -> str:
        text = self._token_texts.get(token)
        if text is None:  # at most one entry per vocabulary id
            text = self._token_texts[token] = str(self.tokenizer.decode([token], skip_special_tokens=False))
        return text

    def _chat_logprobs(self, choice: Choice) -> dict[str, Any]:
        content = []
        for i, (token, logprob) in enumerate(zip(choice.token_ids, choice.logprobs)):
            text = self._token_text(token)
            top = choice.top_logprobs[i] if i < len(choice.top_logprobs) else []
            content.append(
                {
                    "token": text,
                    "logprob": logprob,
                    "bytes": list(text.encode()),
                    "top_logprobs": [
                        {"token": self._token_text(t), "logprob": lp, "bytes": list(self._token_text(t).encode())}
                        for t, lp in top
                    ],
                }
            )
        return {"content": content}

    def _completion_logprobs(self, choice: Choice) -> dict[str, Any]:
        tokens = [self._token_text(t) for t in choice.token_ids]
        offsets, position = [], 0
        for text in tokens:
            offsets.append(position)
            position += len(text)
        return {
            "tokens": tokens,
            "token_logprobs": list(choice.logprobs),
            "top_logprobs": [{self._token_text(t): lp for t, lp in top} for top in choice.top_logprobs] or None,
            "text_offset": offsets,
        }

    def _usage(self, generation_prompts: list[list[int]], n: int, choices: list[Choice]) -> dict[str, int]:
        prompt_tokens = sum(len(p) for p in generation_prompts)
        completion_tokens = sum(len(c.token_ids) for c in choices)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def _chat_message(self, choice: Choice, tools: bool) -> tuple[dict[str, Any], str | None]:
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        finish = choice.finish_reason
        if tools:
            content, calls = parse_tool_calls(choice.text)
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                finish = "tool_calls" if finish == "stop" else finish
        return message, finish

    def _chat_body(self, body: ChatRequest, prompt_ids: list[int], choices: list[Choice], tools: bool) -> dict[str, Any]:
        rendered = []
        for index, choice in enumerate(choices):
            message, finish = self._chat_message(choice, tools)
            entry: dict[str, Any] = {
                "index": index,
                "message": message,
                "logprobs": self._chat_logprobs(choice) if body.logprobs else None,
                "finish_reason": finish,
            }
            if body.return_token_ids:
                entry["token_ids"] = choice.token_ids
            if self.nemo_token_fields:
                message.update(
                    prompt_token_ids=prompt_ids, generation_token_ids=choice.token_ids, generation_log_probs=choice.logprobs
                )
            rendered.append(entry)
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{uuid4_hex()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": rendered,
            "usage": self._usage([prompt_ids], body.n, choices),
        }
        if body.return_token_ids:
            answer["prompt_token_ids"] = prompt_ids
        return answer

    def _completion_body(self, body: CompletionRequest, generation: Generation, choices: list[Choice]) -> dict[str, Any]:
        rendered = []
        for index, choice in enumerate(choices):
            entry: dict[str, Any] = {
                "index": index,
                "text": choice.text,
                "logprobs": self._completion_logprobs(choice) if body.logprobs is not None else None,
                "finish_reason": choice.finish_reason,
            }
            if body.return_token_ids:
                entry["prompt_token_ids"] = generation.prompts[index // generation.n]
                entry["token_ids"] = choice.token_ids
            rendered.append(entry)
        return {
            "id": f"cmpl-{uuid4_hex()}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": rendered,
            "usage": self._usage(generation.prompts, generation.n, choices),
        }

    async def _stream(
        self, request: web.Request, generation: Generation, body: ChatRequest | CompletionRequest, *, chat: bool, tools: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid4_hex()}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
        }
        choices = [Choice() for _ in range(len(generation.prompts) * generation.n)]
        want_logprobs = bool(body.logprobs) if chat else body.logprobs is not None
        if chat:
            first: dict[str, Any] = {
                **head,
                "choices": [
                    {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                    for i in range(len(choices))
                ],
            }
            if body.return_token_ids:
                first["prompt_token_ids"] = generation.prompts[0]
            await response.write(sse(first))
        try:
            async with contextlib.aclosing(self._events(generation)) as events:
                async for index, event in events:
                    choice = choices[index]
                    choice.add(event)
                    piece = Choice()
                    piece.add(event)
                    entry: dict[str, Any] = {"index": index, "logprobs": None, "finish_reason": None}
                    if chat:
                        entry["delta"] = {} if tools else {"content": event.text} if event.text else {}
                        if want_logprobs:
                            entry["logprobs"] = self._chat_logprobs(piece)
                        if event.finish_reason is not None:
                            message, finish = self._chat_message(choice, tools)
                            if tools:
                                entry["delta"] = {k: v for k, v in message.items() if k != "role" and v is not None}
                                for position, call in enumerate(entry["delta"].get("tool_calls", [])):
                                    call["index"] = position
                            entry["finish_reason"] = finish
                    else:
                        entry["text"] = event.text
                        if want_logprobs:
                            entry["logprobs"] = self._completion_logprobs(piece)
                        entry["finish_reason"] = event.finish_reason
                        if body.return_token_ids and len(choice.token_ids) == len(event.token_ids):
                            entry["prompt_token_ids"] = generation.prompts[index // generation.n]
                    if body.return_token_ids:
                        entry["token_ids"] = event.token_ids
                    await response.write(sse({**head, "choices": [entry]}))
        except RuntimeError as exc:
            await response.write(sse(openai_error_body(503, str(exc), "service_unavailable", None, None)))
            return response
        if body.include_usage():
            await response.write(sse({**head, "choices": [], "usage": self._usage(generation.prompts, generation.n, choices)}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _prompt_key(body: ChatRequest) -> str:
    """A 128-bit digest of everything `_render_chat` reads: equal keys render to equal token ids, and a
    long conversation (or an inline image) costs the cache 32 characters, not its whole text."""
    rendered_from = [
        body.messages,
        body.tools,
        body.chat_template_kwargs,
        body.add_generation_prompt,
        body.continue_final_message,
    ]
    return text_digest(json.dumps(rendered_from, ensure_ascii=False, separators=(",", ":")))


def _wants_tools(body: ChatRequest) -> bool:
    return bool(body.tools) and body.tool_choice != "none"


def _error_answer(error: RequestError) -> tuple[int, Any]:
    body = openai_error_body(
        error.status, str(error), ERROR_TYPES.get(error.status, "invalid_request_error"), error.code, error.param
    )
    return error.status, body


def _error(error: RequestError) -> web.Response:
    return _json(*_error_answer(error))


def _json(status: int, body: Any) -> web.Response:
    return web.json_response(body, status=status)


@contextlib.contextmanager
def serve_in_thread(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, **options: Any) -> Iterator[InferenceServer]:
    """`InferenceServer` for sync code: served from an event loop on a background thread until the block ends.

    Args:
        model: the causal LM to serve.
        tokenizer: its tokenizer.
        **options: `InferenceServer` keyword arguments.
    """
    server = InferenceServer(model, tokenizer, **options)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="v1-inference-http", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result()
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


__all__ = ["DEFAULT_MAX_N", "InferenceServer", "serve_in_thread"]
