"""The OpenAI Responses dialect at the endpoint: input items in, output items out (Codex-style agents).

Translation to the canonical OpenAI-chat messages: `instructions` and
system/developer items become system/developer messages; `message` items
become messages (`input_text`/`output_text` -> text parts, `input_image` ->
image parts); `function_call` items join the assistant message before them as
`tool_calls`; `function_call_output` items become `tool` messages (a list
output stays a list of parts); a `reasoning` item becomes the next assistant
message's `reasoning_content`. `previous_response_id` is resolved by the
server from the rollout's own earlier answers. Sampling args take Chat
Completions names (`max_output_tokens` -> `max_tokens`, `reasoning.effort`
-> `reasoning_effort`); `store`, `metadata`, `include`, `user`, `truncation`,
`prompt_cache_key`, `safety_identifier` and `service_tier` are bookkeeping
for OpenAI's servers and are not forwarded; nor is anything else the API does
not define as a sampling param (`SAMPLING`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from v1._util.entropy import token_hex
from v1.interception._dialect import (
    BadRequest,
    Dialect,
    EndpointRequest,
    check_tool_results,
    image_part,
    pick_sampling_args,
    replay,
    sse,
)
from v1.interception._dialect import openai_error_body as error_body
from v1.interception._responses_tools import (
    HOSTED_CALL_ITEMS,
    ToolOrigin,
    call_item,
    custom_arguments,
    flat_name,
    parse_tools,
)
from v1.types import Response, ResponseDelta

if TYPE_CHECKING:
    from v1.interception._session import RolloutSession

ROUTE = "/responses"
SAMPLING = ("temperature", "top_p", "parallel_tool_calls", "top_logprobs")
"""The Responses API's sampling params forwarded as they are; `max_output_tokens`, `reasoning`, `tool_choice`
and `text.format` are mapped to their Chat Completions names."""
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def _parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or a list of content parts", where)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if isinstance(kind, str) and kind in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            parts.append(image_part(part["image_url"]))
        elif isinstance(kind, str):
            raise BadRequest(f"{at}: content part type {kind!r} is not supported by the endpoint", at)
        else:
            raise BadRequest(f"{at} must be a content part object with a 'type'", at)
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _text(content: str | list[dict[str, Any]]) -> str:
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def input_messages(raw: Any, instructions: Any = None, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """Responses `input` (a string or a list of items) as canonical chat messages.

    Items recording hosted tool calls are dropped, each with a line in `warnings`.
    """
    messages: list[dict[str, Any]] = []
    if instructions:
        if not isinstance(instructions, str):
            raise BadRequest("'instructions' must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
        return messages
    if not isinstance(raw, list):
        raise BadRequest("'input' is required: a string or a list of input items", "input")
    reasoning: str | None = None

    def open_assistant() -> dict[str, Any]:
        nonlocal reasoning
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and reasoning is None:
            return last
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
            reasoning = None
        messages.append(message)
        return message

    for index, item in enumerate(raw):
        where = f"input[{index}]"
        if not isinstance(item, Mapping):
            raise BadRequest(f"{where} must be an input item object", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise BadRequest(f"{where}.role must be user, system, developer or assistant, got {role!r}", f"{where}.role")
            content = _parts(item.get("content"), f"{where}.content")
            if role == "assistant":
                message = open_assistant()
                message["content"] = (message["content"] or "") + _text(content)
            else:
                messages.append({"role": role, "content": content})
        elif kind in ("function_call", "custom_tool_call"):
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise BadRequest(f"{where}: a {kind} item needs string 'call_id' and 'name'", where)
            namespace = item.get("namespace") if isinstance(item.get("namespace"), str) else None
            arguments = item.get("arguments") or "{}" if kind == "function_call" else custom_arguments(item.get("input"))
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": flat_name(item["name"], namespace), "arguments": arguments},
            }
            open_assistant().setdefault("tool_calls", []).append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}.call_id must be a string", f"{where}.call_id")
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": _parts(item.get("output", ""), f"{where}.output")}
            )
        elif kind == "reasoning":
            texts = [_text(_parts(item.get(key) or [], f"{where}.{key}")) for key in ("content", "summary")]
            reasoning = next((text for text in texts if text), "")
        elif kind in HOSTED_CALL_ITEMS:
            if warnings is not None:
                warnings.append(f"{where}: {kind} item dropped: a hosted tool's call the upstream model cannot be shown")
        else:
            raise BadRequest(f"{where}: input item type {kind!r} is not supported by the endpoint", where)
    if reasoning:
        open_assistant()
    return messages


def parse_request(body: Any) -> EndpointRequest:
    """Validate a `/responses` body; raises `BadRequest` naming the bad parameter.

    `extra["previous_response_id"]` is left for the server to resolve.
    """
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string", "model")
    if body.get("background"):
        raise BadRequest("background responses are not supported by the endpoint", "background")
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise BadRequest("'previous_response_id' must be a string", "previous_response_id")
    warnings: list[str] = []
    messages = input_messages(body.get("input"), body.get("instructions"), warnings)
    tools, origins = parse_tools(body.get("tools"), warnings)
    sampling_args = pick_sampling_args(body, SAMPLING)
    if body.get("max_output_tokens") is not None:
        sampling_args["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort"):
        sampling_args["reasoning_effort"] = reasoning["effort"]
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("function", "custom"):
        name = flat_name(str(choice.get("name")), choice.get("namespace") if isinstance(choice.get("namespace"), str) else None)
        sampling_args["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif choice is not None:
        sampling_args["tool_choice"] = choice
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = {k: v for k, v in fmt.items() if k != "type"}
        sampling_args["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        sampling_args["response_format"] = {"type": "json_object"}
    return EndpointRequest(
        messages=messages,
        tools=tools,
        sampling_args=sampling_args,
        stream=bool(body.get("stream")),
        model=model,
        extra={"previous_response_id": previous, "tool_origins": origins},
        warnings=warnings,
    )


def _origins(request: EndpointRequest) -> dict[str, ToolOrigin]:
    origins = request.extra.get("tool_origins")
    return origins if isinstance(origins, dict) else {}


def output_items(response: Response, response_id: str, origins: Mapping[str, ToolOrigin] | None = None) -> list[dict[str, Any]]:
    """The answer as output items: reasoning, message, function (or custom tool) calls."""
    message = response.message
    items: list[dict[str, Any]] = []
    if message.reasoning_content:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{response_id}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": message.reasoning_content}],
            }
        )
    if message.content:
        items.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message.content, "annotations": [], "logprobs": []}],
            }
        )
    for call in message.tool_calls or ():
        items.append(call_item(call.id, call.name, call.arguments, origins or {}, "completed"))
    return items


def _usage(response: Response) -> dict[str, Any] | None:
    usage = response.usage
    if usage is None:
        return None
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
    }


def _response_id(response: Response, request: EndpointRequest) -> str:
    return str(request.extra.get("response_id") or response.id or f"resp_{int(time.time() * 1000)}")


def render(response: Response, model: str, request: EndpointRequest) -> dict[str, Any]:
    """A `response` object for a `Response`."""
    response_id = _response_id(response, request)
    truncated = response.message.finish_reason == "length"
    return {
        "id": response_id,
        "object": "response",
        "created_at": response.created,
        "model": model,
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "error": None,
        "output": output_items(response, response_id, _origins(request)),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "previous_response_id": request.extra.get("previous_response_id"),
        "usage": _usage(response),
    }


class StreamWriter:
    """Renders a streamed answer as typed Responses events, opening and closing output items as deltas change kind.

    Item ids follow `output_items` (`rs_<id>`, `msg_<id>`, `fc_<call id>`), so the
    items streamed are exactly those in the final `response.completed`.
    """

    keepalive = b": keepalive\n\n"

    def __init__(self, model: str, request: EndpointRequest, response_id: str | None = None) -> None:
        self.model = model
        self.request = request
        self.id = response_id or str(request.extra.get("response_id") or f"resp_{token_hex(12)}")
        self.request.extra["response_id"] = self.id
        self.numbers = itertools.count()
        self.index = -1
        self.open: dict[str, Any] | None = None
        self.text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(self.numbers), **fields}, kind)

    def start(self) -> list[bytes]:
        pending: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "model": self.model,
            "status": "in_progress",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "previous_response_id": self.request.extra.get("previous_response_id"),
            "usage": None,
        }
        return [self._event("response.created", response=pending), self._event("response.in_progress", response=pending)]

    def _close(self) -> list[bytes]:
        item = self.open
        if item is None:
            return []
        text = "".join(self.text)
        at = {"item_id": item["id"], "output_index": self.index}
        frames = []
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            frames.append(self._event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]))
            frames.append(self._event("response.content_part.done", **at, content_index=0, part=part))
            item = {**item, "status": "completed", "content": [part]}
        elif item["type"] == "reasoning":
            frames.append(self._event("response.reasoning_text.done", **at, content_index=0, text=text))
            item = {**item, "content": [{"type": "reasoning_text", "text": text}]}
        else:
            item = call_item(item["call_id"], item["flat_name"], text, _origins(self.request), "completed")
            if item["type"] == "custom_tool_call":
                frames.append(self._event("response.custom_tool_call_input.done", **at, input=item["input"]))
            else:
                frames.append(self._event("response.function_call_arguments.done", **at, name=item["name"], arguments=text))
        frames.append(self._event("response.output_item.done", output_index=self.index, item=item))
        self.open = None
        self.text = []
        return frames

    def _switch(self, item: dict[str, Any]) -> list[bytes]:
        if self.open is not None and self.open["id"] == item["id"]:
            return []
        frames = self._close()
        self.index += 1
        self.open = item
        shown = {key: value for key, value in item.items() if key != "flat_name"}
        frames.append(self._event("response.output_item.added", output_index=self.index, item=shown))
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            frames.append(
                self._event(
                    "response.content_part.added", item_id=item["id"], output_index=self.index, content_index=0, part=part
                )
            )
        return frames

    def delta(self, delta: ResponseDelta) -> list[bytes]:
        if delta.reasoning_content:
            frames = self._switch({"type": "reasoning", "id": f"rs_{self.id}", "summary": [], "content": []})
            self.text.append(delta.reasoning_content)
            at = {"item_id": f"rs_{self.id}", "output_index": self.index, "content_index": 0}
            return [*frames, self._event("response.reasoning_text.delta", **at, delta=delta.reasoning_content)]
        if delta.content:
            item = {"type": "message", "id": f"msg_{self.id}", "role": "assistant", "status": "in_progress", "content": []}
            frames = self._switch(item)
            self.text.append(delta.content)
            at = {"item_id": item["id"], "output_index": self.index, "content_index": 0}
            return [*frames, self._event("response.output_text.delta", **at, delta=delta.content, logprobs=[])]
        if delta.tool_call_index is None:
            return []
        frames = []
        if delta.tool_call_id is not None:
            name = delta.tool_call_name or ""
            item = call_item(delta.tool_call_id, name, "", _origins(self.request), "in_progress")
            frames = self._switch({**item, "flat_name": name})
        if delta.tool_call_arguments and self.open is not None:
            self.text.append(delta.tool_call_arguments)
            if self.open["type"] == "function_call":  # a custom tool's input is only known whole, at its end
                at = {"item_id": self.open["id"], "output_index": self.index}
                frames.append(self._event("response.function_call_arguments.delta", **at, delta=delta.tool_call_arguments))
        return frames

    def finish(self, response: Response) -> list[bytes]:
        frames = self._close()
        final = render(response, self.model, self.request)
        terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        frames.append(self._event(terminal, response=final))
        return frames

    def error(self, status: int, message: str, type_: str, code: str | None) -> list[bytes]:
        return [self._event("error", code=code, message=message, param=None)]


def render_stream(response: Response, model: str, request: EndpointRequest) -> Iterator[bytes]:
    """Typed Responses events: created, each output item (added, deltas, done), completed."""
    yield from replay(StreamWriter(model, request, _response_id(response, request)), response)


def resolve_previous_response(session: RolloutSession, request: EndpointRequest) -> None:
    """Prepend the conversation `previous_response_id` names (an earlier answer of this rollout)."""
    previous = request.extra.get("previous_response_id")
    assert isinstance(request.messages, list)
    if previous is not None:
        history = session.response_history.get(previous)
        if history is None:
            raise BadRequest(f"previous_response_id {previous!r} is not a response of this rollout", "previous_response_id")
        request.messages = [*history, *request.messages]
    if not request.messages:
        raise BadRequest("'input' is empty: there is nothing to answer", "input")
    check_tool_results(request.messages, "input")


def remember_response(session: RolloutSession, request: EndpointRequest, response: Response) -> None:
    """Give `response` its Responses id (the same for a deduplicated retry) and keep its conversation."""
    known = session.response_ids.get(id(response))
    if known is not None:
        request.extra["response_id"] = known[1]
        return
    response_id = str(request.extra.get("response_id") or f"resp_{token_hex(12)}")
    session.response_ids[id(response)] = (response, response_id)
    assert isinstance(request.messages, list)
    session.response_history[response_id] = [*request.messages, response.message.to_chat_message()]
    request.extra["response_id"] = response_id


DIALECT = Dialect(
    name="responses",
    route=ROUTE,
    parse_request=parse_request,
    render=render,
    render_stream=render_stream,
    stream_writer=StreamWriter,
    error_body=error_body,
    before_call=resolve_previous_response,
    after_call=remember_response,
)

__all__ = [
    "DIALECT",
    "ROUTE",
    "StreamWriter",
    "input_messages",
    "output_items",
    "parse_request",
    "render",
    "render_stream",
]
