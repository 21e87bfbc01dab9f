"""The OpenAI Chat Completions dialect at the endpoint: request parsing and response rendering."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from v1.interception._dialect import (
    SAMPLING_PARAMS,
    BadRequest,
    Dialect,
    EndpointRequest,
    OpenAIChunkWriter,
    check_tool_results,
    openai_completion_body,
    parse_tool_list,
    pick_sampling_args,
    replay,
    sse,
)
from v1.interception._dialect import openai_error_body as error_body
from v1.types import Response, ResponseDelta, Tool

ROUTE = "/chat/completions"

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


_MAPPING = (dict, Mapping)
"""What a JSON object may arrive as: a parsed body's dicts pass the first, cheap check."""


def _check_message(index: int, message: Any) -> None:
    if not isinstance(message, _MAPPING):
        raise BadRequest(f"messages[{index}] must be an object, got {type(message).__name__}", f"messages[{index}]")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise BadRequest(f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}", f"messages[{index}].role")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        _check_content(f"messages[{index}]", content)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        where = f"messages[{index}]"
        raise BadRequest(f"{where}: a tool message needs a string 'tool_call_id'", f"{where}.tool_call_id")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        _check_tool_calls(f"messages[{index}]", role, tool_calls)


def _check_content(where: str, content: Any) -> None:
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or a list of content parts", f"{where}.content")
    for j, part in enumerate(content):
        if not isinstance(part, _MAPPING) or not isinstance(part.get("type"), str):
            raise BadRequest(f"{where}.content[{j}] must be a content part object with a 'type'", f"{where}.content[{j}]")


def _check_tool_calls(where: str, role: str, tool_calls: Any) -> None:
    if role != "assistant" or not isinstance(tool_calls, list):
        raise BadRequest(f"{where}.tool_calls must be a list on an assistant message", f"{where}.tool_calls")
    for j, call in enumerate(tool_calls):
        function = call.get("function") if isinstance(call, _MAPPING) else None
        if not isinstance(function, _MAPPING) or not isinstance(function.get("name"), str):
            raise BadRequest(f"{where}.tool_calls[{j}] needs function.name", f"{where}.tool_calls[{j}]")


def _tool(i: int, entry: Any) -> Tool:
    function = entry.get("function") if isinstance(entry, _MAPPING) else None
    if not isinstance(function, _MAPPING) or entry.get("type", "function") != "function":
        raise BadRequest(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", f"tools[{i}]")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"tools[{i}].function.name must be a non-empty string", f"tools[{i}].function.name")
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, _MAPPING):
        raise BadRequest(f"tools[{i}].function.parameters must be a JSON schema object", f"tools[{i}].function.parameters")
    return Tool(
        name=name, description=function.get("description") or "", parameters=dict(parameters), strict=function.get("strict")
    )


def parse_tools(raw: Any) -> list[Tool] | None:
    return parse_tool_list(raw, _tool)


def parse_request(body: Any) -> EndpointRequest:
    """Validate a `/chat/completions` body; raises `BadRequest` naming the bad parameter."""
    if not isinstance(body, _MAPPING):
        raise BadRequest("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' is required and must be a non-empty list", "messages")
    for index, message in enumerate(messages):
        _check_message(index, message)
    check_tool_results(messages)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    if body.get("n") not in (None, 1):
        raise BadRequest("n > 1 is not supported: a rollout's trajectory is one path", "n")
    if body.get("functions") is not None:
        raise BadRequest("the legacy 'functions' parameter is not supported; use 'tools'", "functions")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, _MAPPING):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    return EndpointRequest(
        messages=list(messages),
        tools=parse_tools(body.get("tools")),
        sampling_args=pick_sampling_args(body, SAMPLING_PARAMS),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        model=model,
    )


def _tool_calls(response: Response) -> list[dict[str, Any]] | None:
    calls = response.message.tool_calls
    if not calls:
        return None
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def _finish_reason(response: Response) -> str:
    return response.message.finish_reason or ("tool_calls" if response.message.tool_calls else "stop")


def _logprobs(response: Response) -> dict[str, Any] | None:
    tokens = response.message.tokens
    if tokens is None:
        return None
    return {
        "content": [
            {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(tokens.completion_ids, tokens.completion_logprobs)
        ]
    }


def render_completion(response: Response, model: str) -> dict[str, Any]:
    """A `chat.completion` object for a `Response`."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.content}
    if response.message.reasoning_content is not None:
        message["reasoning_content"] = response.message.reasoning_content
    tool_calls = _tool_calls(response)
    if tool_calls:
        message["tool_calls"] = tool_calls
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": _finish_reason(response),
        "logprobs": _logprobs(response),
    }
    body = openai_completion_body(response, model, object_name="chat.completion", id_prefix="chatcmpl-", choice=choice)
    tokens = response.message.tokens
    if tokens is not None:
        body["prompt_token_ids"] = list(tokens.prompt_ids)  # the answer's own: the step holds these lists
        choice["token_ids"] = list(tokens.completion_ids)
    return body


def render(response: Response, model: str, request: EndpointRequest) -> dict[str, Any]:
    """The non-streaming answer (the dialect interface every endpoint module offers)."""
    return render_completion(response, model)


class StreamWriter(OpenAIChunkWriter):
    """Renders a streamed answer as `chat.completion.chunk` SSE frames, delta by delta."""

    id_prefix = "chatcmpl-"
    chunk_object = "chat.completion.chunk"

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        return sse(
            {**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None, **extra}]}
        )

    def start(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, delta: ResponseDelta) -> list[bytes]:
        if delta.reasoning_content:
            return [self._chunk({"reasoning_content": delta.reasoning_content})]
        if delta.content:
            return [self._chunk({"content": delta.content})]
        if delta.tool_call_index is None:
            return []
        call: dict[str, Any] = {"index": delta.tool_call_index}
        if delta.tool_call_id is not None:
            call.update(id=delta.tool_call_id, type="function", function={"name": delta.tool_call_name or "", "arguments": ""})
        else:
            call["function"] = {"arguments": delta.tool_call_arguments or ""}
        return [self._chunk({"tool_calls": [call]})]

    def finish(self, response: Response) -> list[bytes]:
        extra: dict[str, Any] = {}
        tokens = response.message.tokens
        if tokens is not None:
            extra = {"token_ids": tokens.completion_ids, "logprobs": _logprobs(response)}
        return [self._chunk({}, _finish_reason(response), **extra), *self.end(response)]


def render_stream(response: Response, model: str, request: EndpointRequest) -> Iterator[bytes]:
    """The SSE byte frames of a streamed answer, ending with ``data: [DONE]``."""
    writer = StreamWriter(model, request, response.id or None)
    writer.base["created"] = response.created
    yield from replay(writer, response)


DIALECT = Dialect(
    name="chat_completions",
    route=ROUTE,
    parse_request=parse_request,
    render=render,
    render_stream=render_stream,
    stream_writer=StreamWriter,
    error_body=error_body,
)

__all__ = [
    "DIALECT",
    "ROUTE",
    "StreamWriter",
    "parse_request",
    "parse_tools",
    "render",
    "render_completion",
    "render_stream",
]
