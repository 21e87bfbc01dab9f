"""What the endpoint dialects share: the parsed request, the 400 error, SSE framing, tool-list and tool-result
checks, replaying a whole answer as a stream, and the OpenAI error, usage and chunk-stream shapes.

A dialect module (`chat_completions`, `completions`, `responses`, `messages`)
parses its wire format into an `EndpointRequest` of canonical OpenAI-chat
messages, provider-agnostic `Tool`s and sampling args under Chat Completions
names, and renders a `Response` back, whole or as its own stream of events.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import orjson

from v1._util import bounded_json as _bounded_json
from v1._util.entropy import token_hex
from v1._util.json_check import PLAIN_TYPES_ONLY, compact_json_text
from v1.types import Messages, Response, ResponseDelta, Tool

if TYPE_CHECKING:
    from v1.interception._session import RolloutSession

SAMPLING_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning_effort",
        "top_k",
        "min_p",
        "repetition_penalty",
        "min_tokens",
        "thinking",
    }
)
"""Every sampling arg the endpoint forwards, under its canonical (Chat Completions / vLLM) name.

A dialect forwards the ones its API defines; anything else in a program's body
(`extra_body` merges into it, so unknown keys, `model` overrides, headers...) is
never part of the upstream request.
"""


def pick_sampling_args(body: Mapping[str, Any], names: Container[str]) -> dict[str, Any]:
    """The entries of `body` named in `names` (a dialect's own sampling params), None values dropped.

    A body holds a few keys and `names` a score: the body's keys are the ones walked.
    """
    return {name: value for name, value in body.items() if name in names and value is not None}


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
    warnings: list[str] = field(default_factory=list)
    """What the endpoint dropped from the request because the upstream cannot do it (hosted tools, ...):
    recorded on the step as `extras["warnings"]`."""


def dumps(value: Any) -> str:
    return compact_json_text(value)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `event:` lines for typed streams (Responses, Messages)."""
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {dumps(data)}\n\n".encode()


_PARSED_TOOLS: dict[tuple[Callable[[int, Any], Tool], bytes], list[Tool]] = {}
"""Tool lists read before, by dialect reader and exact JSON text (see `parse_tool_list`)."""
_PARSED_TOOLS_MAX = 128
_PARSED_TOOLS_MAX_TEXT = 16 * 1024


def _tool_list_key(raw: list[Any]) -> bytes | None:
    """`raw`'s JSON text when it tells every value apart (``1``, ``1.0`` and ``true`` write differently; ``NaN``
    writes as ``null``, so a text with ``null`` is not a key) and is short enough to keep; else None."""
    try:
        text = orjson.dumps(raw, option=PLAIN_TYPES_ONLY)
    except TypeError:  # an int wider than 64 bits, a lone surrogate, a value of no JSON type
        return None
    return text if len(text) <= _PARSED_TOOLS_MAX_TEXT and b"null" not in text else None


def parse_tool_list(raw: Any, parse_tool: Callable[[int, Any], Tool]) -> list[Tool] | None:
    """A request's `tools`, each entry read by the dialect's `parse_tool(index, entry)`; None when absent or empty.

    A program sends the same tools with every call of a rollout, and every rollout of an environment the
    same: a list whose exact JSON text was read before gets the `Tool`s read then (in a list of its own;
    nothing in v1 changes a `Tool` it is handed). At most `_PARSED_TOOLS_MAX` lists of at most
    `_PARSED_TOOLS_MAX_TEXT` bytes are kept.
    """
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list", "tools")
    key = _tool_list_key(raw)
    if key is not None:
        known = _PARSED_TOOLS.get((parse_tool, key))
        if known is not None:
            return list(known)
    tools = [parse_tool(index, entry) for index, entry in enumerate(raw)]
    if not tools:
        return None
    if key is not None:
        if len(_PARSED_TOOLS) >= _PARSED_TOOLS_MAX:
            _PARSED_TOOLS.clear()  # a program sending ever new lists costs itself the reading, never memory
        _PARSED_TOOLS[parse_tool, key] = list(tools)
    return tools


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
    if message.reasoning_signature:
        yield ResponseDelta(reasoning_signature=message.reasoning_signature)
    for piece in re.findall(r"\s*\S+\s*", message.content or "") or ([message.content] if message.content else []):
        yield ResponseDelta(content=piece)
    for index, call in enumerate(message.tool_calls or ()):
        yield ResponseDelta(tool_call_index=index, tool_call_id=call.id, tool_call_name=call.name)
        yield ResponseDelta(tool_call_index=index, tool_call_arguments=call.arguments)


class StreamWriter(Protocol):
    """A dialect's stream renderer: the frames that open the stream, carry each delta, and end it."""

    def start(self) -> list[bytes]: ...

    def delta(self, delta: ResponseDelta) -> list[bytes]: ...

    def finish(self, response: Response) -> list[bytes]: ...


class EndpointStreamWriter(StreamWriter, Protocol):
    """A `StreamWriter` the endpoint relays with: also a keepalive frame and an in-stream error event."""

    keepalive: bytes

    def error(self, status: int, message: str, type_: str, code: str | None) -> list[bytes]: ...


def _nothing_before(session: RolloutSession, request: EndpointRequest) -> None:
    return None


def _nothing_after(session: RolloutSession, request: EndpointRequest, response: Response) -> None:
    return None


CHARS_PER_TOKEN = 4


def estimate_tokens(request: EndpointRequest) -> int:
    """A request's input size in tokens, estimated at `CHARS_PER_TOKEN` characters a token (no tokenizer is called)."""
    tools = [tool.model_dump() for tool in request.tools or ()]
    size = len(json.dumps([request.messages, tools], ensure_ascii=False))
    return max(1, -(-size // CHARS_PER_TOKEN))


def route_pattern(path: str) -> re.Pattern[str]:
    """A route's path as a regex, its ``{field}`` segments as named groups."""
    parts = re.split(r"\{(\w+)\}", path)
    return re.compile("".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^{{}}/]+)" for i, part in enumerate(parts)))


@dataclass(frozen=True)
class TokenCounter:
    """A dialect's token-counting route (under its `prefix`): `count(body, **route fields)` -> the dialect's answer.

    The upstream may have no tokenizer route, so counting never calls it: agents use the figure
    to plan context compaction, where an estimate (`estimate_tokens`) is enough. `count` raises
    `BadRequest` for a body its dialect's calls would refuse.
    """

    route: str
    count: Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Dialect:
    """One wire format the endpoint speaks; the server treats every dialect alike through these.

    Attributes:
        name: the API name programs ask for (`state.get_client(api)`).
        route: the path under `prefix`; ``{field}`` segments (Gemini's ``/models/{model}:{method}``) are
            passed to `parse_request` as keyword arguments.
        parse_request: a body (and the route's fields) -> `EndpointRequest` (raises `BadRequest`).
        render: a whole answer as the dialect's JSON body.
        render_stream: a whole answer as the dialect's stream of frames (the mock server replays with it).
        stream_writer: `(model, request, response_id)` -> the writer that relays one streamed answer.
        error_body: `(status, message, type, code, param)` -> the dialect's error JSON.
        before_call: resolves what the request refers to in the rollout (Responses' `previous_response_id`).
        after_call: remembers an answer before it is rendered (Responses' ids and history).
        prefix: the API root the route lies under, after the rollout's ``/r/<id>``.
        token_counter: the dialect's token-counting route, if it has one.
    """

    name: str
    route: str
    parse_request: Callable[..., EndpointRequest]
    render: Callable[[Response, str, EndpointRequest], dict[str, Any]]
    render_stream: Callable[[Response, str, EndpointRequest], Iterator[bytes]]
    stream_writer: Callable[[str, EndpointRequest, str | None], EndpointStreamWriter]
    error_body: Callable[[int, str, str, str | None, str | None], dict[str, Any]]
    before_call: Callable[[RolloutSession, EndpointRequest], None] = _nothing_before
    after_call: Callable[[RolloutSession, EndpointRequest, Response], None] = _nothing_after
    prefix: str = "/v1"
    token_counter: TokenCounter | None = None

    @cached_property
    def path_pattern(self) -> re.Pattern[str]:
        """The route's full path under ``/r/<id>`` as a regex, its ``{field}`` segments as named groups."""
        return route_pattern(self.prefix + self.route)


def replay(writer: StreamWriter, response: Response) -> Iterator[bytes]:
    """A complete `Response` as the frames `writer` would send had it been streamed (`deltas_of`)."""
    yield from writer.start()
    for delta in deltas_of(response):
        yield from writer.delta(delta)
    yield from writer.finish(response)


def openai_error_body(status: int, message: str, type_: str, code: str | None, param: str | None) -> dict[str, Any]:
    """OpenAI's error shape (Chat Completions, Completions, Responses)."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def openai_usage(response: Response) -> dict[str, int] | None:
    """`usage` as Chat Completions and Completions report it."""
    usage = response.usage
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
    }


def openai_completion_body(
    response: Response, model: str, *, object_name: str, id_prefix: str, choice: dict[str, Any]
) -> dict[str, Any]:
    """A whole Chat Completions or Completions answer: its one `choice` in the envelope both share, usage included."""
    return {
        "id": response.id or f"{id_prefix}{int(time.time() * 1000)}",
        "object": object_name,
        "created": response.created,
        "model": model,
        "choices": [choice],
        "usage": openai_usage(response),
    }


OPENAI_STREAM_END = b"data: [DONE]\n\n"


class OpenAIChunkWriter:
    """What the Chat Completions and Completions streams share: every chunk under one envelope (`base`),
    a usage chunk at the end when the request asked for one, then ``data: [DONE]``.

    Subclasses name the envelope (`id_prefix`, `chunk_object`) and render the chunks themselves.
    """

    keepalive = b": keepalive\n\n"
    id_prefix: ClassVar[str]
    chunk_object: ClassVar[str]

    def __init__(self, model: str, request: EndpointRequest, response_id: str | None = None) -> None:
        self.request = request
        self.base = {
            "id": response_id or f"{self.id_prefix}{token_hex(12)}",
            "object": self.chunk_object,
            "created": int(time.time()),
            "model": model,
        }

    def end(self, response: Response) -> list[bytes]:
        """The frames after the last chunk: usage (if asked for), then ``[DONE]``."""
        if self.request.include_usage:
            return [sse({**self.base, "choices": [], "usage": openai_usage(response)}), OPENAI_STREAM_END]
        return [OPENAI_STREAM_END]

    def error(self, status: int, message: str, type_: str, code: str | None) -> list[bytes]:
        return [sse(openai_error_body(status, message, type_, code, None)), OPENAI_STREAM_END]


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def arguments_object(arguments: str) -> Any:
    """A tool call's JSON arguments as an object (Anthropic's `input`), `{}` for an empty string."""
    try:
        value = _bounded_json.loads(arguments or "{}", "tool call arguments")
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_value": value}


__all__ = [
    "SAMPLING_PARAMS",
    "CHARS_PER_TOKEN",
    "BadRequest",
    "Dialect",
    "EndpointRequest",
    "EndpointStreamWriter",
    "pick_sampling_args",
    "OpenAIChunkWriter",
    "StreamWriter",
    "check_tool_results",
    "deltas_of",
    "dumps",
    "estimate_tokens",
    "openai_completion_body",
    "openai_error_body",
    "openai_usage",
    "parse_tool_list",
    "replay",
    "route_pattern",
    "sse",
    "TokenCounter",
]
