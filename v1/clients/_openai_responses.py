"""`openai_responses`: the OpenAI Responses API (input items in, output items out).

The whole conversation is sent every call (`store: false`, no
`previous_response_id`): the trajectory is the source of truth, so any turn
can be replayed or edited.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from v1.clients._base import StreamReader, split_create_args
from v1.clients._http import is_async_openai
from v1.clients._openai_chat_completions import OpenAIChatCompletionsClient, raise_for_upstream_error
from v1.errors import InvalidModelResponseError, ModelError, NotSupportedError
from v1.types import (
    ChatMessage,
    FinishReason,
    Messages,
    Response,
    ResponseDelta,
    ResponseMessage,
    SamplingArgs,
    Tool,
    ToolCall,
    Usage,
)


@functools.cache
def create_params() -> frozenset[str]:
    """The keyword arguments of the SDK's `responses.create` (the SDK is imported on first use)."""
    from openai.resources.responses import AsyncResponses

    return frozenset(inspect.signature(AsyncResponses.create).parameters) - {"self", "extra_body"}


NativeItem = dict[str, Any]
NativeResponse = dict[str, Any]


def _content_parts(content: Any, text_type: str) -> str | list[dict[str, Any]]:
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": text_type, "text": part.get("text", "")})
        elif kind == "image_url":
            url = part["image_url"]["url"] if isinstance(part.get("image_url"), dict) else part.get("image_url")
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        else:
            raise NotSupportedError(f"content part type {kind!r} cannot be sent to an openai_responses upstream")
    return parts


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def input_items(messages: list[ChatMessage]) -> list[NativeItem]:
    """Chat messages as Responses input items."""
    items: list[NativeItem] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            if message.get("reasoning_content"):
                items.append(
                    {
                        "type": "reasoning",
                        "summary": [],
                        "content": [{"type": "reasoning_text", "text": message["reasoning_content"]}],
                    }
                )
            text = _text(message.get("content"))
            if text:
                items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
            for call in message.get("tool_calls") or ():
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function.get("arguments") or "{}",
                    }
                )
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": _content_parts(message.get("content"), "input_text"),
                }
            )
        elif role in ("user", "system", "developer"):
            items.append({"type": "message", "role": role, "content": _content_parts(message.get("content"), "input_text")})
        else:
            raise NotSupportedError(f"messages with role {role!r} cannot be sent to an openai_responses upstream")
    return items


def responses_sampling_args(sampling_args: SamplingArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """Canonical (Chat Completions) sampling args as Responses `create()` keywords and `extra_body`."""
    args = {k: v for k, v in sampling_args.items() if v is not None}
    out: dict[str, Any] = {}
    for name in ("max_tokens", "max_completion_tokens"):
        if name in args:
            out.setdefault("max_output_tokens", args.pop(name))
    if "reasoning_effort" in args:
        out["reasoning"] = {"effort": args.pop("reasoning_effort")}
    choice = args.pop("tool_choice", None)
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out["tool_choice"] = {"type": "function", "name": choice["function"].get("name")}
    elif choice is not None:
        out["tool_choice"] = choice
    response_format = args.pop("response_format", None)
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        out["text"] = {"format": {"type": "json_schema", **(response_format.get("json_schema") or {})}}
    elif isinstance(response_format, dict):
        out["text"] = {"format": response_format}
    if args.pop("logprobs", None) and "top_logprobs" not in args:
        args["top_logprobs"] = 0
    known, extra = split_create_args(args, create_params())
    return {**out, **known}, extra


class ResponsesStreamReader:
    """Reads the Responses API's typed stream events: deltas as they arrive, the final `response` at the end."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.final: NativeResponse | None = None

    def read(self, event: Any) -> list[ResponseDelta]:
        kind = event.type
        if kind == "response.output_text.delta":
            return [ResponseDelta(content=event.delta)]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [ResponseDelta(reasoning_content=event.delta)]
        if kind == "response.output_item.added" and event.item.type == "function_call":
            self.calls[event.item.id or event.item.call_id] = index = len(self.calls)
            return [ResponseDelta(tool_call_index=index, tool_call_id=event.item.call_id, tool_call_name=event.item.name)]
        if kind == "response.function_call_arguments.delta" and event.item_id in self.calls:
            return [ResponseDelta(tool_call_index=self.calls[event.item_id], tool_call_arguments=event.delta)]
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = event.response.model_dump()
        elif kind == "error":
            raise ModelError(f"upstream stream failed: {getattr(event, 'message', event)}")
        return []

    def native(self) -> NativeResponse:
        if self.final is None:
            raise InvalidModelResponseError("the upstream's Responses stream ended without a final response")
        return self.final


class OpenAIResponsesClient(OpenAIChatCompletionsClient):
    """Responses over the official `openai` SDK."""

    client_type = "openai_responses"

    def to_native_prompt(self, messages: Messages) -> tuple[Any, dict[str, Any]]:
        if isinstance(messages, str):
            return messages, {}
        return input_items(messages), {}

    def to_native_tool(self, tool: Tool) -> dict[str, Any]:
        native: dict[str, Any] = {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        native["strict"] = bool(tool.strict)
        return native

    async def get_native_response(
        self, prompt: Any, model: str, sampling_args: SamplingArgs, tools: Any, **kwargs: Any
    ) -> NativeResponse:
        request = self._responses_request(prompt, model, sampling_args, tools, kwargs.get("state"))
        return await self._create_json(self.client.responses, request)

    def can_stream(self) -> bool:
        return is_async_openai(self.client)

    def stream_opener(
        self, prompt: Any, model: str, sampling_args: SamplingArgs, tools: Any, **kwargs: Any
    ) -> Callable[[], Awaitable[Any]]:
        request = self._responses_request(prompt, model, sampling_args, tools, kwargs.get("state"))
        return lambda: self.client.responses.create(**request, stream=True)

    def stream_reader(self) -> StreamReader[NativeResponse]:
        return ResponsesStreamReader()

    def _responses_request(self, prompt: Any, model: str, sampling_args: SamplingArgs, tools: Any, state: Any) -> dict[str, Any]:
        known, extra_body = responses_sampling_args(sampling_args)
        request: dict[str, Any] = {**known, "model": model, "input": prompt, "store": False}
        if tools:
            request["tools"] = tools
        if extra_body:
            request["extra_body"] = extra_body
        headers = self.headers_from_state(state)
        if headers:
            request["extra_headers"] = headers
        return request

    def raise_from_native_response(self, response: NativeResponse) -> None:
        raise_for_upstream_error(response, "responses")
        if response.get("status") == "failed" or not isinstance(response.get("output"), list):
            raise InvalidModelResponseError(f"response has no usable output: {str(response)[:200]}")

    def from_native_response(self, response: NativeResponse) -> Response:
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        for item in response["output"]:
            kind = item.get("type")
            if kind == "message":
                texts.extend(part.get("text") or part.get("refusal") or "" for part in item.get("content") or ())
            elif kind == "reasoning":
                parts = item.get("content") or item.get("summary") or ()
                reasoning.append("".join(part.get("text", "") for part in parts))
            elif kind == "function_call":
                calls.append(
                    ToolCall(
                        id=item.get("call_id") or item.get("id") or f"call_{len(calls)}",
                        name=item["name"],
                        arguments=item.get("arguments") or "{}",
                    )
                )
        truncated = response.get("status") == "incomplete"
        finish_reason: FinishReason = "length" if truncated else ("tool_calls" if calls else "stop")
        usage = response.get("usage") or None
        return Response(
            id=response.get("id") or "",
            created=int(response.get("created_at") or time.time()),
            model=response.get("model") or "",
            usage=Usage(
                prompt_tokens=usage.get("input_tokens") or 0,
                completion_tokens=usage.get("output_tokens") or 0,
                total_tokens=usage.get("total_tokens") or 0,
                reasoning_tokens=(usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
            )
            if usage
            else None,
            message=ResponseMessage(
                content="".join(texts) if texts else None,
                reasoning_content="".join(reasoning) if reasoning else None,
                finish_reason=finish_reason,
                is_truncated=truncated,
                tool_calls=calls or None,
            ),
        )


__all__ = ["OpenAIResponsesClient", "input_items", "responses_sampling_args"]
