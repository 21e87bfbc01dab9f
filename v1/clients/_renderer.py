"""`renderer`: the chat template rendered locally with the model's tokenizer; token ids go upstream.

Each call renders the messages (and tools) with the tokenizer's chat template and
sends the prompt as token ids to the upstream's Completions route (``POST /completions``
with ``prompt: [ids]`` and ``return_token_ids``, as vLLM and `v1.inference` take it);
the completion's token ids and logprobs come back with the text.

Later turns of a conversation reuse the exact ids of the previous turn: when a
trajectory step's prompt + completion messages begin the new prompt, the new prompt
ids are that step's prompt ids + completion ids + the ids of only the text the
template adds after them. So every turn's prompt ids extend the previous turn's
prompt + completion ids, and no sampled token is ever re-tokenized. Where the
answer's text differs from the sampled tokens (skipped special tokens, a cut stop
string, re-serialised tool calls), the sampled ids are kept and the template's close
of an assistant turn follows them. When the template does not render the new prompt
as a continuation of the previous one at all (it rewrites earlier turns), the prompt
is rendered afresh and `BridgeStats.restarted` counts it: the trainer then starts a
new sample there instead of splicing.

The tokenizer is `AutoTokenizer.from_pretrained(config.renderer_model_name or model)`
(loaded once per name), or one given to the constructor. Tool calls are read from
Hermes-style ``<tool_call>`` blocks in the text. Requires `transformers` (the
`[train]` extra); it is imported when the first tokenizer is loaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from v1.clients._openai_chat_completions import (
    FINISH_REASONS,
    NativeMessage,
    NativeResponse,
    NativeTool,
    OpenAIChatCompletionsClient,
    raise_for_upstream_error,
    usage_from_openai,
)
from v1.clients._openai_completions import completions_sampling_args
from v1.clients._token_history import previous_turn, step_token_ids, trajectory_of
from v1.clients._tool_call_text import parse_tool_calls
from v1.errors import ConfigError, InvalidModelResponseError
from v1.types import Messages, Response, ResponseMessage, ResponseTokens, SamplingArgs, ToolCall

_tokenizers: dict[str, Any] = {}
_tokenizers_lock = threading.Lock()


def load_tokenizer(name: str) -> Any:
    """`AutoTokenizer.from_pretrained(name)`, loaded once per name in this process.

    Raises:
        ConfigError: transformers is missing, or the tokenizer cannot be loaded.
    """
    with _tokenizers_lock:
        if name not in _tokenizers:
            try:
                from transformers import AutoTokenizer  # heavy and optional: only the renderer needs it
            except ImportError:
                raise ConfigError("client_type 'renderer' needs transformers: pip install 'v1[train]'") from None
            try:
                _tokenizers[name] = AutoTokenizer.from_pretrained(name)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"renderer: cannot load the tokenizer {name!r}: {exc}") from None
        return _tokenizers[name]


TURN_SENTINEL = "\u27e6v1:turn-content\u27e7"


def render_text(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: list[NativeTool] | None,
    *,
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> str:
    """The chat template's text for `messages` (by default ending with the assistant turn's opening)."""
    return str(
        tokenizer.apply_chat_template(
            list(messages), tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
        )
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    """`text`'s token ids, without the tokenizer adding special tokens (the template wrote them)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def text_digest(text: str) -> str:
    """A short fingerprint of a rendered prompt's text."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def ids_digest(ids: Sequence[int]) -> str:
    """A short fingerprint of a list of token ids."""
    return hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).hexdigest()


class RenderedPrompts:
    """Which template text (by fingerprint) each prompt sent recently stands for, so a later turn can check it still renders so."""

    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, prompt_ids: Sequence[int], text: str) -> None:
        with self._lock:
            self._texts[ids_digest(prompt_ids)] = text_digest(text)
            while len(self._texts) > self.capacity:
                self._texts.popitem(last=False)

    def text_digest_of(self, prompt_ids: Sequence[int]) -> str | None:
        with self._lock:
            return self._texts.get(ids_digest(prompt_ids))


def bridge_prompt_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: list[NativeTool] | None,
    previous_prompt: Sequence[Mapping[str, Any]],
    previous_prompt_ids: list[int],
    previous_completion_ids: list[int],
    previous_prompt_digest: str | None = None,
    **template_kwargs: Any,
) -> list[int] | None:
    """Prompt ids for `messages` that extend ``previous_prompt_ids + previous_completion_ids``, or None.

    `messages` must continue `previous_prompt` with the assistant turn those completion
    ids produced. Only text after the sampled tokens is tokenized: when the template's
    text for `messages` continues the previous prompt with exactly the sampled text, the
    rest of it; otherwise (the answer's text differs from the sampled tokens: skipped
    special tokens, a cut stop string, re-serialised tool calls, invalid UTF-8) the
    template's close of an assistant turn, then the text of the messages after it.
    None when the previous prompt ids do not stand for the template's text for
    `previous_prompt` with these tools (checked against `previous_prompt_digest`, the
    `text_digest` of the text they were built from, when known; else against their
    decoded text), or the template does not render `messages` as its continuation.
    """
    full = render_text(tokenizer, messages, tools, **template_kwargs)
    prompt_text = render_text(tokenizer, previous_prompt, tools, **template_kwargs)
    if not full.startswith(prompt_text):
        return None
    if previous_prompt_digest is not None:
        if text_digest(prompt_text) != previous_prompt_digest:
            return None
    elif str(tokenizer.decode(previous_prompt_ids, skip_special_tokens=False)) != prompt_text:
        return None
    sampled = str(tokenizer.decode(previous_completion_ids, skip_special_tokens=False))
    if full.startswith(sampled, len(prompt_text)):
        return [*previous_prompt_ids, *previous_completion_ids, *encode(tokenizer, full[len(prompt_text) + len(sampled) :])]
    turn = len(previous_prompt)
    if len(messages) <= turn or messages[turn].get("role") != "assistant":
        return None
    with_turn = render_text(tokenizer, messages[: turn + 1], tools, add_generation_prompt=False, **template_kwargs)
    with_sentinel = render_text(
        tokenizer,
        [*previous_prompt, {"role": "assistant", "content": TURN_SENTINEL}],
        tools,
        add_generation_prompt=False,
        **template_kwargs,
    )
    if not full.startswith(with_turn) or not with_sentinel.startswith(prompt_text) or TURN_SENTINEL not in with_sentinel:
        return None
    closing = with_sentinel[with_sentinel.rindex(TURN_SENTINEL) + len(TURN_SENTINEL) :]
    if previous_completion_ids and previous_completion_ids[-1] in set(tokenizer.all_special_ids):
        last = str(tokenizer.decode(previous_completion_ids[-1:], skip_special_tokens=False))
        if closing.startswith(last):
            closing = closing[len(last) :]
    return [*previous_prompt_ids, *previous_completion_ids, *encode(tokenizer, closing + full[len(with_turn) :])]


@dataclass
class BridgeStats:
    """How prompts were built: first turns, turns that extend the previous one, and turns rendered afresh after a mismatch."""

    first_turns: int = 0
    extended: int = 0
    restarted: int = 0


def prompt_ids_for(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: list[NativeTool] | None,
    trajectory: Sequence[Mapping[str, Any]],
    stats: BridgeStats,
    rendered: RenderedPrompts | None = None,
    **template_kwargs: Any,
) -> list[int]:
    """The prompt ids to send for `messages`: extending the previous turn's ids where the trajectory has it.

    `rendered` remembers which text each returned prompt stands for, to check the next turn against.
    """
    step = previous_turn(trajectory, messages)
    ids: list[int] | None = None
    if step is not None:
        previous = step_token_ids(step)
        assert previous is not None  # previous_turn only returns steps with ids
        digest = rendered.text_digest_of(previous[0]) if rendered is not None else None
        ids = bridge_prompt_ids(
            tokenizer, messages, tools, list(step.get("prompt") or ()), previous[0], previous[1], digest, **template_kwargs
        )
        if ids is not None:
            stats.extended += 1
        else:
            stats.restarted += 1
    else:
        stats.first_turns += 1
    text = render_text(tokenizer, messages, tools, **template_kwargs)
    if ids is None:
        ids = encode(tokenizer, text)
    if rendered is not None:
        rendered.remember(ids, text)
    return ids


class RendererClient(OpenAIChatCompletionsClient):
    """Chat rendered client-side, token ids to and from the upstream's Completions route.

    Args:
        client_or_config: a `ClientConfig` (or an `AsyncOpenAI`).
        tokenizer: the tokenizer to render with; by default loaded from
            `config.renderer_model_name`, else from the request's model name.
    """

    client_type = "renderer"
    stats = BridgeStats()  # process-wide, like the tokenizers: read it to see how often turns were re-rendered
    rendered = RenderedPrompts()

    def __init__(self, client_or_config: Any, tokenizer: Any = None) -> None:
        super().__init__(client_or_config)
        self._tokenizer = tokenizer

    async def tokenizer_for(self, model: str) -> Any:
        """The tokenizer this client renders `model`'s prompts with."""
        if self._tokenizer is not None:
            return self._tokenizer
        name = (self.config.renderer_model_name if self.config is not None else None) or model
        return await asyncio.to_thread(load_tokenizer, name)

    def to_native_prompt(self, messages: Messages) -> tuple[list[NativeMessage], dict[str, Any]]:
        if isinstance(messages, str):
            return [{"role": "user", "content": messages}], {}
        return [dict(m) for m in messages], {}

    async def get_native_response(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[NativeTool] | None,
        **kwargs: Any,
    ) -> NativeResponse:
        args = dict(sampling_args)
        extra = dict(args.pop("extra_body", None) or {})
        template_kwargs = dict(extra.pop("chat_template_kwargs", None) or args.pop("chat_template_kwargs", None) or {})
        tokenizer = await self.tokenizer_for(model)
        prompt_ids = await asyncio.to_thread(
            prompt_ids_for,
            tokenizer,
            prompt,
            tools,
            trajectory_of(kwargs.get("state")),
            self.stats,
            self.rendered,
            **template_kwargs,
        )
        args.pop("n", None)
        known, extra_body = completions_sampling_args({**args, "extra_body": extra})
        known.setdefault("logprobs", 0)
        request: dict[str, Any] = {
            "model": model,
            "prompt": prompt_ids,
            **known,
            "extra_body": {**extra_body, "return_token_ids": True},
        }
        headers = self.headers_from_state(kwargs.get("state"))
        if headers:
            request["extra_headers"] = headers
        response = await self._create_json(self.client.completions, request)
        if isinstance(response, dict):
            response["v1_renderer"] = {"prompt_ids": prompt_ids, "tools": bool(tools)}
        return response

    def raise_from_native_response(self, response: NativeResponse) -> None:
        raise_for_upstream_error(response, "completions")
        choices = response.get("choices")
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("text"), str):
            raise InvalidModelResponseError(f"completion has no usable choices: {str(response)[:200]}")
        choice = choices[0]
        if choice.get("token_ids") is None:
            raise InvalidModelResponseError(
                "the upstream answered without token_ids: it must support return_token_ids (vLLM, v1 serve)"
            )
        sent = response["v1_renderer"]["prompt_ids"]
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != sent:
            raise InvalidModelResponseError("the upstream's prompt_token_ids differ from the prompt ids sent")

    def from_native_response(self, response: NativeResponse) -> Response:
        choice = response["choices"][0]
        completion_ids = list(choice["token_ids"])
        logprobs = [float(lp or 0.0) for lp in ((choice.get("logprobs") or {}).get("token_logprobs") or [])]
        if len(logprobs) != len(completion_ids):
            raise InvalidModelResponseError(f"{len(logprobs)} logprobs for {len(completion_ids)} completion tokens")
        prompt_ids = response["v1_renderer"]["prompt_ids"]
        content: str | None = choice["text"]
        calls: list[dict[str, Any]] = []
        if response["v1_renderer"]["tools"]:
            content, calls = parse_tool_calls(choice["text"])
        finish_reason = "tool_calls" if calls else FINISH_REASONS.get(choice.get("finish_reason") or "") or "stop"
        return Response(
            id=response.get("id") or "",
            created=int(response.get("created") or time.time()),
            model=response.get("model") or "",
            usage=usage_from_openai(response.get("usage")),
            message=ResponseMessage(
                content=content,
                finish_reason=finish_reason,  # type: ignore[arg-type]
                is_truncated=finish_reason == "length",
                tokens=ResponseTokens(
                    prompt_ids=prompt_ids,
                    prompt_mask=[0] * len(prompt_ids),
                    completion_ids=completion_ids,
                    completion_mask=[1] * len(completion_ids),
                    completion_logprobs=logprobs,
                ),
                tool_calls=[ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]) for c in calls]
                or None,
            ),
        )


__all__ = ["BridgeStats", "RendererClient", "bridge_prompt_ids", "load_tokenizer", "prompt_ids_for", "render_text"]
