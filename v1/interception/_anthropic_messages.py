"""The Anthropic Messages dialect at the endpoint: content blocks in, content blocks out.

Translation to the canonical OpenAI-chat messages: `system` becomes a system
message; `text`/`image` blocks become content parts; `tool_use` blocks become
`tool_calls` (arguments as a JSON string); `tool_result` blocks become `tool`
messages (a list content stays a list of parts, images included; `is_error`
kept); `thinking` blocks become the assistant's `reasoning_content`, their
signature its `reasoning_signature` (rendered back unchanged); a `system` message
inside `messages` (Claude Code sends them) stays a system message. Server tools
(`web_search_20250305`, `bash_20250124`, ...) and `redacted_thinking` blocks
cannot reach a generic upstream: they are dropped, with a warning on the step.
Sampling args take Chat Completions names (`stop_sequences` -> `stop`,
`tool_choice` mapped); the rest pass through unchanged (`top_k`, `thinking`, ...).
`count_tokens` estimates a request's input tokens without calling the model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from v1._util.entropy import token_hex
from v1.interception._dialect import (
    BadRequest,
    Dialect,
    EndpointRequest,
    TokenCounter,
    arguments_object,
    check_tool_results,
    estimate_tokens,
    image_part,
    pick_sampling_args,
    replay,
    sse,
)
from v1.types import Response, ResponseDelta, Tool

ROUTE = "/messages"
SAMPLING = ("max_tokens", "temperature", "top_p", "top_k", "thinking")
"""The Messages API's sampling params forwarded as they are; `stop_sequences` and `tool_choice` are mapped."""
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _image(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, Mapping) and source.get("type") == "base64":
        return image_part(f"data:{source.get('media_type')};base64,{source.get('data')}")
    if isinstance(source, Mapping) and source.get("type") == "url":
        return image_part(str(source.get("url")))
    raise BadRequest(f"{where}: image source must be base64 or url", where)


def _parts(content: Any, where: str, allowed: frozenset[str]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of content blocks", where)
    return [_part(block, f"{where}[{j}]", allowed) for j, block in enumerate(content)]


def _part(block: Any, at: str, allowed: frozenset[str]) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, Mapping) else None
    if not isinstance(kind, str):
        raise BadRequest(f"{at} must be a content block object with a 'type'", at)
    if kind not in allowed:
        raise BadRequest(f"{at}: content block type {kind!r} is not supported here (supported: {sorted(allowed)})", at)
    if kind == "image":
        return _image(block, at)
    if not isinstance(block.get("text"), str):
        raise BadRequest(f"{at}.text must be a string", f"{at}.text")
    return {"type": "text", "text": block["text"]}


def _simplify(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _user_messages(content: Any, where: str) -> list[dict[str, Any]]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise BadRequest(f"{where} must be a string or a list of content blocks", where)
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise BadRequest(f"{at}.tool_use_id must be a string", f"{at}.tool_use_id")
            result = block.get("content", "")
            tool_content = _simplify(_parts(result, f"{at}.content", frozenset({"text", "image"}))) if result else ""
            tool_message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": tool_content}
            if block.get("is_error") is True:
                tool_message["is_error"] = True
            out.append(tool_message)
        else:
            parts.append(_part(block, at, frozenset({"text", "image"})))
    if parts:
        out.append({"role": "user", "content": _simplify(parts)})
    return out


def _assistant_message(content: Any, where: str, warnings: list[str]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of content blocks", where)
    texts: list[str] = []
    thinking: list[str] = []
    signature: str | None = None
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}[{j}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
            signature = block.get("signature") if isinstance(block.get("signature"), str) else signature
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise BadRequest(f"{at}: a tool_use block needs string 'id' and 'name'", at)
            arguments = json.dumps(block.get("input") or {})
            calls.append({"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}})
        elif kind == "redacted_thinking":
            warnings.append(f"{at}: redacted_thinking block dropped: only the provider that wrote it can read it")
        else:
            raise BadRequest(f"{at}: content block type {kind!r} is not supported in an assistant turn", at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thinking:
        message["reasoning_content"] = "".join(thinking)
        if signature:
            message["reasoning_signature"] = signature
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(raw: Any, warnings: list[str]) -> list[Tool] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list", "tools")
    tools = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise BadRequest(f"tools[{i}] needs a non-empty 'name'", f"tools[{i}].name")
        if entry.get("type") not in (None, "custom"):
            warnings.append(f"tools[{i}]: server tool type {entry.get('type')!r} dropped: only the provider's servers can run it")
            continue
        schema = entry.get("input_schema")
        if not isinstance(schema, Mapping):
            raise BadRequest(f"tools[{i}].input_schema must be a JSON schema object", f"tools[{i}].input_schema")
        tools.append(Tool(name=entry["name"], description=entry.get("description") or "", parameters=dict(schema)))
    return tools or None


def _tool_choice(raw: Any) -> Any:
    kind = raw.get("type") if isinstance(raw, Mapping) else None
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool" and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    raise BadRequest("tool_choice must be {'type': 'auto'|'any'|'none'|'tool', ...}", "tool_choice")


def parse_request(body: Any) -> EndpointRequest:
    """Validate a `/v1/messages` body; raises `BadRequest` naming the bad parameter."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: field required (a string)", "model")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: field required (a non-empty list)", "messages")
    messages: list[dict[str, Any]] = []
    warnings: list[str] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _simplify(_parts(system, "system", frozenset({"text"})))})
    for index, message in enumerate(raw):
        where = f"messages[{index}]"
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "user":
            messages.extend(_user_messages(message.get("content"), f"{where}.content"))
        elif role == "assistant":
            messages.append(_assistant_message(message.get("content"), f"{where}.content", warnings))
        elif role == "system":
            content = _simplify(_parts(message.get("content"), f"{where}.content", frozenset({"text"})))
            messages.append({"role": "system", "content": content})
        else:
            raise BadRequest(f"{where}.role must be 'user', 'assistant' or 'system', got {role!r}", f"{where}.role")
    check_tool_results(messages)
    sampling_args = pick_sampling_args(body, SAMPLING)
    if body.get("stop_sequences") is not None:
        sampling_args["stop"] = body["stop_sequences"]
    if body.get("tool_choice") is not None:
        sampling_args["tool_choice"] = _tool_choice(body["tool_choice"])
    return EndpointRequest(
        messages=messages,
        tools=_tools(body.get("tools"), warnings),
        sampling_args=sampling_args,
        stream=bool(body.get("stream")),
        model=model,
        warnings=warnings,
    )


def content_blocks(response: Response) -> list[dict[str, Any]]:
    """The assistant's answer as Anthropic content blocks: thinking, text, tool_use."""
    message = response.message
    blocks: list[dict[str, Any]] = []
    if message.reasoning_content:
        signature = message.reasoning_signature or ""
        blocks.append({"type": "thinking", "thinking": message.reasoning_content, "signature": signature})
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls or ():
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments_object(call.arguments)})
    return blocks


def _stop_reason(response: Response) -> str:
    reason = response.message.finish_reason or ("tool_calls" if response.message.tool_calls else "stop")
    return STOP_REASONS[reason]


def _usage(response: Response) -> dict[str, int]:
    usage = response.usage
    return {"input_tokens": usage.prompt_tokens if usage else 0, "output_tokens": usage.completion_tokens if usage else 0}


def render(response: Response, model: str, request: EndpointRequest) -> dict[str, Any]:
    """A `message` object for a `Response`."""
    return {
        "id": response.id or f"msg_{int(time.time() * 1000)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(response),
        "stop_reason": _stop_reason(response),
        "stop_sequence": None,
        "usage": _usage(response),
    }


class StreamWriter:
    """Renders a streamed answer as Anthropic's typed events, opening and closing content blocks as deltas change kind."""

    keepalive = sse({"type": "ping"}, "ping")

    def __init__(self, model: str, request: EndpointRequest, response_id: str | None = None) -> None:
        self.model = model
        self.request = request
        self.id = response_id or f"msg_{token_hex(12)}"
        self.index = -1
        self.open: tuple[str, int | None] | None = None
        self.signed = False

    def start(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [sse({"type": "message_start", "message": message}, "message_start")]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        frames = []
        if self.open[0] == "thinking" and not self.signed:
            frames.append(self._delta({"type": "signature_delta", "signature": ""}))
        frames.append(sse({"type": "content_block_stop", "index": self.index}, "content_block_stop"))
        self.open = None
        return frames

    def _switch(self, kind: str, call: int | None, block: dict[str, Any]) -> list[bytes]:
        if self.open == (kind, call):
            return []
        frames = self._close()
        self.index += 1
        self.open = (kind, call)
        self.signed = False
        frames.append(sse({"type": "content_block_start", "index": self.index, "content_block": block}, "content_block_start"))
        return frames

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": self.index, "delta": delta}, "content_block_delta")

    def delta(self, delta: ResponseDelta) -> list[bytes]:
        if delta.reasoning_content:
            frames = self._switch("thinking", None, {"type": "thinking", "thinking": "", "signature": ""})
            return [*frames, self._delta({"type": "thinking_delta", "thinking": delta.reasoning_content})]
        if delta.reasoning_signature:
            frames = self._switch("thinking", None, {"type": "thinking", "thinking": "", "signature": ""})
            self.signed = True
            return [*frames, self._delta({"type": "signature_delta", "signature": delta.reasoning_signature})]
        if delta.content:
            frames = self._switch("text", None, {"type": "text", "text": ""})
            return [*frames, self._delta({"type": "text_delta", "text": delta.content})]
        if delta.tool_call_index is None:
            return []
        if delta.tool_call_id is not None:
            block = {"type": "tool_use", "id": delta.tool_call_id, "name": delta.tool_call_name or "", "input": {}}
            frames = self._switch("tool_use", delta.tool_call_index, block)
        else:
            frames = []
        if delta.tool_call_arguments:
            frames.append(self._delta({"type": "input_json_delta", "partial_json": delta.tool_call_arguments}))
        return frames

    def finish(self, response: Response) -> list[bytes]:
        usage = _usage(response)
        return [
            *self._close(),
            sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(response), "stop_sequence": None},
                    "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]},
                },
                "message_delta",
            ),
            sse({"type": "message_stop"}, "message_stop"),
        ]

    def error(self, status: int, message: str, type_: str, code: str | None) -> list[bytes]:
        return [sse(error_body(status, message, type_, code, None), "error")]


def render_stream(response: Response, model: str, request: EndpointRequest) -> Iterator[bytes]:
    """Anthropic's typed stream: message_start, content blocks (start/delta/stop), message_delta, message_stop."""
    yield from replay(StreamWriter(model, request, response.id or None), response)


COUNT_TOKENS_ROUTE = "/messages/count_tokens"


def count_tokens(body: Any) -> dict[str, int]:
    """`/v1/messages/count_tokens`: the request checked like a `messages` call, its size estimated (`estimate_tokens`).

    Raises `BadRequest` like `parse_request`.
    """
    if isinstance(body, Mapping) and "max_tokens" not in body:
        body = {**body, "max_tokens": 1}
    return {"input_tokens": estimate_tokens(parse_request(body))}


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def error_body(status: int, message: str, type_: str, code: str | None, param: str | None) -> dict[str, Any]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


DIALECT = Dialect(
    name="messages",
    route=ROUTE,
    parse_request=parse_request,
    render=render,
    render_stream=render_stream,
    stream_writer=StreamWriter,
    error_body=error_body,
    token_counter=TokenCounter(COUNT_TOKENS_ROUTE, count_tokens),
)

__all__ = [
    "COUNT_TOKENS_ROUTE",
    "DIALECT",
    "ROUTE",
    "StreamWriter",
    "content_blocks",
    "count_tokens",
    "error_body",
    "parse_request",
    "render",
    "render_stream",
]
