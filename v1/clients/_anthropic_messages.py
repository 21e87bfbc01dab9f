"""`anthropic_messages`: the Anthropic Messages API over the official `anthropic` SDK.

Translation from the canonical OpenAI-chat messages: system (and developer)
messages before the first turn become `system`, later ones user text; `reasoning_content`
becomes a `thinking` block (with its `reasoning_signature`); `tool_calls` become `tool_use`
blocks; `tool` messages become `tool_result` blocks (images kept as image blocks, `is_error`
kept) in the next user turn;
consecutive same-role turns are merged, as the API requires alternation.
`max_tokens` defaults to `DEFAULT_MAX_TOKENS` when neither the program nor the
harness set it. `api_base_url` may end in ``/v1`` (the SDK adds ``/v1/messages``).
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from v1._util import bounded_json as _bounded_json
from v1.clients._answer_limits import bounded_http_client
from v1.clients._base import Client, StreamReader, describe_error, request_refused, split_create_args
from v1.clients._credentials import resolve_api_key
from v1.clients._http import anthropic_async_client_class, http_library, sdk_timeout
from v1.clients._openai_chat_completions import OVERLONG_MARKERS, RETRYABLE_STATUSES, is_request_refusal
from v1.config import ClientConfig
from v1.errors import Error, InvalidModelResponseError, ModelError, NotSupportedError, OverlongPromptError
from v1.types import ChatMessage, Messages, Response, ResponseDelta, ResponseMessage, SamplingArgs, Tool, ToolCall, Usage

if TYPE_CHECKING:
    import anthropic


@functools.cache
def create_params() -> frozenset[str]:
    """The keyword arguments of the SDK's `messages.create` (anthropic is imported on first use: it is large)."""
    from anthropic.resources.messages import AsyncMessages

    return frozenset(inspect.signature(AsyncMessages.create).parameters) - {"self", "extra_body"}


DEFAULT_MAX_TOKENS = 4096
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
}
UNTRANSLATABLE = {"logprobs": "logprobs", "top_logprobs": "logprobs", "n": "n > 1"}

NativeMessage = dict[str, Any]
NativeResponse = dict[str, Any]


def _image_block(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            url = part["image_url"]["url"] if isinstance(part.get("image_url"), dict) else part.get("image_url")
            blocks.append(_image_block(str(url)))
        else:
            raise NotSupportedError(f"content part type {kind!r} cannot be sent to an anthropic_messages upstream")
    return blocks


def to_anthropic(messages: list[ChatMessage]) -> tuple[list[NativeMessage], str | None]:
    """Chat messages as Anthropic `messages` and `system`."""
    system: list[str] = []
    native: list[NativeMessage] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer") and not native:
            system.append("".join(b["text"] for b in _blocks(message.get("content")) if b["type"] == "text"))
            continue
        blocks: list[dict[str, Any]]
        if role in ("system", "developer"):  # mid-conversation instructions (Claude Code sends them): a user turn's text
            blocks = _blocks(message.get("content"))
            native_role = "user"
        elif role == "assistant":
            blocks = []
            if message.get("reasoning_content"):
                signature = message.get("reasoning_signature") or ""
                blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": signature})
            blocks.extend(_blocks(message.get("content")))
            for call in message.get("tool_calls") or ():
                function = call["function"]
                arguments = _bounded_json.loads(function.get("arguments") or "{}", "tool call arguments")
                blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"], "input": arguments})
            native_role = "assistant"
        elif role == "tool":
            result = _blocks(message.get("content"))
            blocks = [{"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": result}]
            if message.get("is_error"):
                blocks[0]["is_error"] = True
            native_role = "user"
        elif role == "user":
            blocks = _blocks(message.get("content"))
            native_role = "user"
        else:
            raise NotSupportedError(f"messages with role {role!r} cannot be sent to an anthropic_messages upstream")
        if native and native[-1]["role"] == native_role:
            native[-1]["content"].extend(blocks)
        else:
            native.append({"role": native_role, "content": blocks})
    return native, "\n\n".join(system) if system else None


def anthropic_sampling_args(sampling_args: SamplingArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """Canonical (Chat Completions) sampling args as Messages `create()` keywords and `extra_body`."""
    args = {k: v for k, v in sampling_args.items() if v is not None}
    for name, feature in UNTRANSLATABLE.items():
        if args.get(name) not in (None, False, 0, 1) or (name == "logprobs" and args.get(name) is True):
            raise NotSupportedError(
                f"{feature} cannot be requested from an anthropic_messages upstream (the API has no {feature})"
            )
        args.pop(name, None)
    out: dict[str, Any] = {}
    for name in ("max_tokens", "max_completion_tokens"):
        if name in args:
            out.setdefault("max_tokens", args.pop(name))
    out.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    stop = args.pop("stop", None)
    if stop is not None:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    choice = args.pop("tool_choice", None)
    if choice == "auto":
        out["tool_choice"] = {"type": "auto"}
    elif choice == "required":
        out["tool_choice"] = {"type": "any"}
    elif choice == "none":
        out["tool_choice"] = {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
    if "reasoning_effort" in args:
        raise NotSupportedError("reasoning_effort cannot be sent to an anthropic_messages upstream; set 'thinking' instead")
    known, extra = split_create_args(args, create_params())
    return {**out, **known}, extra


class MessagesStreamReader:
    """Reads Anthropic's typed stream events into the `message` they build, content block by content block."""

    def __init__(self) -> None:
        self.message: NativeResponse = {"content": []}
        self.calls = 0
        self.stopped = False

    def read(self, event: Any) -> list[ResponseDelta]:
        kind = event.type
        if kind == "message_start":
            self.message = {**event.message.model_dump(), "content": []}
        elif kind == "content_block_start":
            block = event.content_block.model_dump()
            deltas = []
            if block["type"] == "tool_use":
                block["input"] = ""
                deltas.append(ResponseDelta(tool_call_index=self.calls, tool_call_id=block["id"], tool_call_name=block["name"]))
                self.calls += 1
            self.message["content"].append(block)
            return deltas
        elif kind == "content_block_delta":
            block, delta = self.message["content"][-1], event.delta
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
                return [ResponseDelta(content=delta.text)]
            if delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
                return [ResponseDelta(reasoning_content=delta.thinking)]
            if delta.type == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.signature
                return [ResponseDelta(reasoning_signature=delta.signature)]
            if delta.type == "input_json_delta":
                block["input"] += delta.partial_json
                return [ResponseDelta(tool_call_index=self.calls - 1, tool_call_arguments=delta.partial_json)]
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "message_delta":
            self.message["stop_reason"] = event.delta.stop_reason
            usage = event.usage.model_dump(exclude_none=True)
            self.message["usage"] = {**(self.message.get("usage") or {}), **usage}
        return []

    def native(self) -> NativeResponse:
        if not self.stopped or not self.message.get("stop_reason"):
            raise InvalidModelResponseError(
                "the upstream's Messages stream ended without message_stop (truncated, or not a stream)"
            )
        for block in self.message["content"]:
            if block["type"] == "tool_use":
                block["input"] = _bounded_json.loads(block["input"] or "{}", "tool_use input")
        return self.message


class AnthropicMessagesClient(Client[Any, list[NativeMessage], NativeResponse, dict[str, Any]]):
    """Messages over the official `anthropic` SDK. Accepts an `AsyncAnthropic` or a `ClientConfig`."""

    client_type = "anthropic_messages"

    def setup_client(self, config: ClientConfig) -> anthropic.AsyncAnthropic:
        import anthropic

        base_url = config.api_base_url.rstrip("/").removesuffix("/v1")
        return anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key=resolve_api_key(config.api_key_var),
            max_retries=0,
            timeout=sdk_timeout(config),
            default_headers=config.extra_headers or None,
            http_client=bounded_http_client(anthropic_async_client_class(), config),
        )

    def to_native_prompt(self, messages: Messages) -> tuple[list[NativeMessage], dict[str, Any]]:
        if isinstance(messages, str):
            return [{"role": "user", "content": [{"type": "text", "text": messages}]}], {}
        native, system = to_anthropic(messages)
        return native, ({"system": system} if system else {})

    def to_native_tool(self, tool: Tool) -> dict[str, Any]:
        return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}

    async def get_native_response(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[dict[str, Any]] | None,
        **kwargs: Any,
    ) -> NativeResponse:
        request = self._request(prompt, model, sampling_args, tools, **kwargs)
        raw = await self.client.messages.with_raw_response.create(**request)
        return raw.http_response.json()  # type: ignore[no-any-return]

    def can_stream(self) -> bool:
        return True

    def stream_opener(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[dict[str, Any]] | None,
        **kwargs: Any,
    ) -> Callable[[], Awaitable[Any]]:
        request = self._request(prompt, model, sampling_args, tools, **kwargs)
        return lambda: self.client.messages.create(**request, stream=True)

    def stream_reader(self) -> StreamReader[NativeResponse]:
        return MessagesStreamReader()

    def _request(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[dict[str, Any]] | None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        known, extra_body = anthropic_sampling_args(sampling_args)
        request: dict[str, Any] = {**known, "model": model, "messages": prompt}
        if kwargs.get("system"):
            request["system"] = kwargs["system"]
        if tools:
            request["tools"] = tools
        if extra_body:
            request["extra_body"] = extra_body
        headers = self.headers_from_state(kwargs.get("state"))
        if headers:
            request["extra_headers"] = headers
        return request

    def is_retryable(self, error: BaseException) -> bool:
        import anthropic

        if isinstance(error, (anthropic.APIConnectionError, anthropic.APITimeoutError)):
            return True
        if isinstance(error, anthropic.APIStatusError):
            return error.status_code in RETRYABLE_STATUSES or error.status_code >= 500
        return isinstance(error, (http_library().TransportError, ConnectionError, TimeoutError))

    def is_auth_error(self, error: BaseException) -> bool:
        import anthropic

        return isinstance(error, (anthropic.AuthenticationError, anthropic.PermissionDeniedError))

    def translate_error(self, error: BaseException) -> Error:
        import anthropic

        if isinstance(error, anthropic.BadRequestError) and any(m in str(error).lower() for m in OVERLONG_MARKERS):
            return OverlongPromptError(f"prompt too long for the model: {error}")
        if isinstance(error, anthropic.APIStatusError) and is_request_refusal(error.status_code):
            return request_refused(error.status_code, error.body, error.message)
        return ModelError(describe_error(error))

    def raise_from_native_response(self, response: NativeResponse) -> None:
        if not isinstance(response, dict):
            raise InvalidModelResponseError(f"expected a JSON object from messages, got {type(response).__name__}")
        if response.get("type") == "error":
            raise ModelError(f"upstream returned an error: {response.get('error')}")
        if not isinstance(response.get("content"), list):
            raise InvalidModelResponseError(f"message has no content list: {str(response)[:200]}")

    def from_native_response(self, response: NativeResponse) -> Response:
        texts: list[str] = []
        thinking: list[str] = []
        signature: str | None = None
        calls: list[ToolCall] = []
        for block in response["content"]:
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text", ""))
            elif kind == "thinking":
                thinking.append(block.get("thinking", ""))
                signature = block.get("signature") or signature
            elif kind == "tool_use":
                calls.append(ToolCall(id=block["id"], name=block["name"], arguments=json.dumps(block.get("input") or {})))
        finish_reason = STOP_REASONS.get(response.get("stop_reason") or "", "stop")
        usage = response.get("usage") or None
        prompt_tokens = (usage or {}).get("input_tokens") or 0
        completion_tokens = (usage or {}).get("output_tokens") or 0
        return Response(
            id=response.get("id") or "",
            created=int(time.time()),
            model=response.get("model") or "",
            usage=Usage(
                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
            )
            if usage
            else None,
            message=ResponseMessage(
                content="".join(texts) if texts else None,
                reasoning_content="".join(thinking) if thinking else None,
                reasoning_signature=signature,
                finish_reason=finish_reason,  # type: ignore[arg-type]
                is_truncated=finish_reason == "length",
                tool_calls=calls or None,
            ),
        )

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()


__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicMessagesClient", "anthropic_sampling_args", "to_anthropic"]
