"""What every endpoint dialect shares: the parsed request, the 400 error, SSE framing, tool-result checks.

A dialect module (`chat_completions`, `completions`, `responses`, `messages`)
parses its wire format into an `EndpointRequest` of canonical OpenAI-chat
messages, provider-agnostic `Tool`s and sampling args under Chat Completions
names, and renders a `Response` back, whole or as its own stream of events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from v1.types import Messages, Response, ResponseDelta, Tool


class BadRequest(Exception):
    """A malformed or untranslatable request: answered with status 400 in the dialect's error shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class EndpointRequest:
    """A program's model call, in canonical form."""

    messages: Messages
    tools: list[Tool] | None
    sampling_args: dict[str, Any]
    stream: bool = False
    include_usage: bool = False
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `event:` lines for typed streams (Responses, Messages)."""
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {dumps(data)}\n\n".encode()


def check_tool_results(messages: list[dict[str, Any]], where: str = "messages") -> None:
    """Every tool result must answer a tool call made earlier in the conversation."""
    called: set[str] = set()
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                called.add(call["id"])
        if message.get("role") == "tool" and message.get("tool_call_id") not in called:
            raise BadRequest(
                f"tool result for unknown tool call id {message.get('tool_call_id')!r}: no earlier assistant turn made that call",
                f"{where}[{index}]",
            )


def deltas_of(response: Response) -> Iterator[ResponseDelta]:
    """A complete `Response` as the deltas a stream of it would carry (text word by word)."""
    message = response.message
    if message.reasoning_content:
        yield ResponseDelta(reasoning_content=message.reasoning_content)
    for piece in re.findall(r"\s*\S+\s*", message.content or "") or ([message.content] if message.content else []):
        yield ResponseDelta(content=piece)
    for index, call in enumerate(message.tool_calls or ()):
        yield ResponseDelta(tool_call_index=index, tool_call_id=call.id, tool_call_name=call.name)
        yield ResponseDelta(tool_call_index=index, tool_call_arguments=call.arguments)


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def arguments_object(arguments: str) -> Any:
    """A tool call's JSON arguments as an object (Anthropic's `input`), `{}` for an empty string."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_value": value}


__all__ = ["BadRequest", "EndpointRequest", "check_tool_results", "deltas_of", "dumps", "sse"]
