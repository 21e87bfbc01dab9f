"""The Google Gemini dialect at the endpoint: `POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent` (server-sent events, as with `alt=sse`), and `:countTokens` (an estimate).

Translation to the canonical OpenAI-chat messages: `systemInstruction` becomes a
system message; `contents` turns of role `user` become user messages (`text`
parts, `inlineData`/`fileData` images) and, for their `functionResponse` parts,
`tool` messages; turns of role `model` become assistant messages (`text` parts
joined, `thought` parts as `reasoning_content`, a `thoughtSignature` as
`reasoning_signature`, `functionCall` parts as `tool_calls`, arguments as a JSON
string). A call without an `id` gets one from its turn and position, and a
`functionResponse` without one answers the earliest unanswered call of that name.
A response object that holds one string (`{"output": "..."}`) becomes that string
(`{"error": "..."}` also marks the result an error); any other, its JSON text.
`tools[].functionDeclarations` (`parameters` in the API's schema subset, its
upper-case type names lowered, or `parametersJsonSchema`) become tools; every other
tool kind is one of Google's hosted tools (`googleSearch`, `codeExecution`, ...),
dropped with a warning,
as are `safetySettings` and `thinkingConfig`, which a generic upstream cannot
honour. `generationConfig` maps to Chat Completions names (`maxOutputTokens` ->
`max_tokens`, `stopSequences` -> `stop`, `topP`, `topK`, a JSON
`responseMimeType` with its schema -> `response_format`); `toolConfig` to
`tool_choice`. Field names are accepted in the API's camelCase and in snake_case.
The answer is one candidate whose parts are the thought, the text and the
function calls (each with its `id`); errors take Google's shape
(`{"error": {"code", "message", "status"}}`).
"""

from __future__ import annotations

import json
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
    replay,
    sse,
)
from v1.types import Response, ResponseDelta, Tool

PREFIX = "/v1beta"
ROUTE = "/models/{model}:{method}"
COUNT_TOKENS_ROUTE = "/models/{model}:countTokens"
METHODS = {"generateContent": False, "streamGenerateContent": True}
"""The methods served, and whether each streams."""
FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}
DROPPED_FIELDS = {
    "safetySettings": "safety settings apply at Google's servers only",
    "cachedContent": "cached contents live at Google's servers only",
}
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _field(mapping: Mapping[str, Any], name: str) -> Any:
    """`name` (camelCase) or its snake_case spelling."""
    value = mapping.get(name)
    return mapping.get(_snake(name)) if value is None else value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadRequest(f"{where} must be an object", where)
    return value


def _parts(turn: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    parts = turn.get("parts")
    if not isinstance(parts, list):
        raise BadRequest(f"{where}.parts must be a list", f"{where}.parts")
    for j, part in enumerate(parts):
        _object(part, f"{where}.parts[{j}]")
    return parts


def _media(part: Mapping[str, Any], at: str) -> dict[str, Any]:
    inline = _field(part, "inlineData")
    if inline is not None:
        inline = _object(inline, f"{at}.inlineData")
        mime, data = _field(inline, "mimeType"), inline.get("data")
        if not isinstance(mime, str) or not mime.startswith("image/") or not isinstance(data, str):
            raise BadRequest(f"{at}.inlineData: only images (an image/* mimeType and base64 data) are supported", at)
        return image_part(f"data:{mime};base64,{data}")
    file = _object(_field(part, "fileData"), f"{at}.fileData")
    mime, uri = _field(file, "mimeType"), _field(file, "fileUri")
    if not isinstance(uri, str) or (isinstance(mime, str) and not mime.startswith("image/")):
        raise BadRequest(f"{at}.fileData: only images with a fileUri are supported", at)
    return image_part(uri)


def _response_content(response: Any, at: str) -> tuple[Any, bool]:
    """A functionResponse's `response` as tool-message content, and whether it reports an error."""
    if not isinstance(response, Mapping):
        raise BadRequest(f"{at}.response must be an object", f"{at}.response")
    if len(response) == 1:
        ((key, value),) = response.items()
        if isinstance(value, str):
            return value, key == "error"
    return json.dumps(response, ensure_ascii=False), False


class _Calls:
    """The function calls of the conversation so far that no functionResponse has answered yet."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []

    def answer(self, name: str, call_id: Any, at: str) -> str:
        for index, (pending_id, pending_name) in enumerate(self.pending):
            if (call_id is not None and pending_id == call_id) or (call_id is None and pending_name == name):
                del self.pending[index]
                return pending_id
        if isinstance(call_id, str):
            return call_id  # check_tool_results names it if nothing called it
        raise BadRequest(f"{at}: functionResponse {name!r} answers no earlier functionCall", at)


def _user_turn(turn: Mapping[str, Any], where: str, calls: _Calls) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(_parts(turn, where)):
        at = f"{where}.parts[{j}]"
        response = _field(part, "functionResponse")
        if response is not None:
            response = _object(response, f"{at}.functionResponse")
            name = response.get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{at}.functionResponse.name must be a non-empty string", f"{at}.functionResponse.name")
            content, is_error = _response_content(response.get("response"), f"{at}.functionResponse")
            message: dict[str, Any] = {"role": "tool", "tool_call_id": calls.answer(name, response.get("id"), at)}
            message["content"] = content
            if is_error:
                message["is_error"] = True
            out.append(message)
        elif isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif _field(part, "inlineData") is not None or _field(part, "fileData") is not None:
            parts.append(_media(part, at))
        else:
            raise BadRequest(f"{at}: a user part must hold text, inlineData, fileData or functionResponse", at)
    if parts:
        text_only = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if text_only else parts})
    return out


def _model_turn(turn: Mapping[str, Any], where: str, index: int, calls: _Calls) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    signature: str | None = None
    tool_calls: list[dict[str, Any]] = []
    for j, part in enumerate(_parts(turn, where)):
        at = f"{where}.parts[{j}]"
        signature = _field(part, "thoughtSignature") if isinstance(_field(part, "thoughtSignature"), str) else signature
        call = _field(part, "functionCall")
        if call is not None:
            call = _object(call, f"{at}.functionCall")
            name, args = call.get("name"), call.get("args", {})
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{at}.functionCall.name must be a non-empty string", f"{at}.functionCall.name")
            if not isinstance(args, Mapping):
                raise BadRequest(f"{at}.functionCall.args must be an object", f"{at}.functionCall.args")
            given = call.get("id")
            call_id = given if isinstance(given, str) and given else f"call_{index}_{j}"
            calls.pending.append((call_id, name))
            arguments = json.dumps(args, ensure_ascii=False)
            tool_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        elif isinstance(part.get("text"), str):
            (thoughts if part.get("thought") is True else texts).append(part["text"])
        elif signature is None or set(part) - {"thoughtSignature", "thought_signature", "thought"}:
            raise BadRequest(f"{at}: a model part must hold text or functionCall", at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    if signature:
        message["reasoning_signature"] = signature
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _schema(value: Any) -> Any:
    """The API's schema subset as JSON schema: upper-case type names lowered, everything else kept."""
    if isinstance(value, Mapping):
        return {
            key: value[key].lower() if key == "type" and isinstance(value[key], str) else _schema(value[key]) for key in value
        }
    if isinstance(value, list):
        return [_schema(item) for item in value]
    return value


def _tools(raw: Any, warnings: list[str]) -> list[Tool] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list", "tools")
    tools: list[Tool] = []
    for i, entry in enumerate(raw):
        entry = _object(entry, f"tools[{i}]")
        declarations = _field(entry, "functionDeclarations")
        for key in entry:
            if key not in ("functionDeclarations", "function_declarations"):
                warnings.append(f"tools[{i}]: hosted tool '{key}' dropped: only Google's servers can run it")
        if declarations is None:
            continue
        if not isinstance(declarations, list):
            raise BadRequest(f"tools[{i}].functionDeclarations must be a list", f"tools[{i}].functionDeclarations")
        for j, declaration in enumerate(declarations):
            at = f"tools[{i}].functionDeclarations[{j}]"
            declaration = _object(declaration, at)
            name = declaration.get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{at}.name must be a non-empty string", f"{at}.name")
            schema = _field(declaration, "parametersJsonSchema")
            schema = _schema(declaration.get("parameters")) if schema is None else schema
            if schema is None:
                schema = {"type": "object", "properties": {}}
            if not isinstance(schema, Mapping):
                raise BadRequest(f"{at}.parameters must be a schema object", f"{at}.parameters")
            tools.append(Tool(name=name, description=declaration.get("description") or "", parameters=dict(schema)))
    return tools or None


def _tool_choice(raw: Any) -> Any:
    config = _field(_object(raw, "toolConfig"), "functionCallingConfig")
    if config is None:
        return None
    config = _object(config, "toolConfig.functionCallingConfig")
    mode = str(config.get("mode") or "AUTO").upper()
    allowed = _field(config, "allowedFunctionNames")
    if mode == "NONE":
        return "none"
    if mode == "ANY":
        if isinstance(allowed, list) and len(allowed) == 1 and isinstance(allowed[0], str):
            return {"type": "function", "function": {"name": allowed[0]}}
        return "required"
    if mode in ("AUTO", "VALIDATED", "MODE_UNSPECIFIED"):
        return "auto"
    raise BadRequest(f"toolConfig.functionCallingConfig.mode {mode!r} is not one of AUTO, ANY, NONE", "toolConfig")


def _sampling_args(raw: Any, warnings: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    config = _object(raw, "generationConfig")
    names = {"temperature": "temperature", "topP": "top_p", "topK": "top_k", "maxOutputTokens": "max_tokens"}
    names |= {"seed": "seed", "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty"}
    names |= {"stopSequences": "stop"}
    args = {canonical: value for name, canonical in names.items() if (value := _field(config, name)) is not None}
    count = _field(config, "candidateCount")
    if count is not None and count != 1:
        raise BadRequest("generationConfig.candidateCount: only one candidate is supported", "generationConfig.candidateCount")
    mime = _field(config, "responseMimeType")
    schema = _field(config, "responseJsonSchema")
    schema = _schema(_field(config, "responseSchema")) if schema is None else schema
    if mime == "application/json":
        if isinstance(schema, Mapping):
            args["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": dict(schema)}}
        else:
            args["response_format"] = {"type": "json_object"}
    if _field(config, "thinkingConfig") is not None:
        warnings.append("generationConfig.thinkingConfig dropped: the upstream decides how the model thinks")
    return args


def parse_request(body: Any, model: str = "", method: str = "generateContent") -> EndpointRequest:
    """Validate a `generateContent` body (`model` and `method` come from the path); raises `BadRequest`."""
    if method not in METHODS:
        raise BadRequest(f"unknown method {method!r}: use generateContent, streamGenerateContent or countTokens")
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise BadRequest("contents: field required (a non-empty list)", "contents")
    warnings: list[str] = []
    messages: list[dict[str, Any]] = []
    system = _field(body, "systemInstruction")
    if system is not None:
        text = "".join(
            str(part["text"]) for part in _parts(_object(system, "systemInstruction"), "systemInstruction") if "text" in part
        )
        if text:
            messages.append({"role": "system", "content": text})
    calls = _Calls()
    for index, turn in enumerate(contents):
        where = f"contents[{index}]"
        turn = _object(turn, where)
        role = turn.get("role", "user")
        if role in ("user", "function"):
            messages.extend(_user_turn(turn, where, calls))
        elif role == "model":
            messages.append(_model_turn(turn, where, index, calls))
        else:
            raise BadRequest(f"{where}.role must be 'user' or 'model', got {role!r}", f"{where}.role")
    check_tool_results(messages, "contents")
    for name, reason in DROPPED_FIELDS.items():
        if _field(body, name) is not None:
            warnings.append(f"{name} dropped: {reason}")
    sampling_args = _sampling_args(_field(body, "generationConfig"), warnings)
    tool_config = _field(body, "toolConfig")
    if tool_config is not None and (choice := _tool_choice(tool_config)) is not None:
        sampling_args["tool_choice"] = choice
    return EndpointRequest(
        messages=messages,
        tools=_tools(body.get("tools"), warnings),
        sampling_args=sampling_args,
        stream=METHODS[method],
        model=model.removeprefix("models/") or None,
        warnings=warnings,
    )


def _finish_reason(response: Response) -> str:
    reason = response.message.finish_reason or "stop"
    return FINISH_REASONS.get(reason, "OTHER")


def _usage(response: Response) -> dict[str, int]:
    usage = response.usage
    if usage is None:
        return {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}
    metadata = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total_tokens or usage.prompt_tokens + usage.completion_tokens,
    }
    if usage.reasoning_tokens:
        metadata["thoughtsTokenCount"] = usage.reasoning_tokens
    return metadata


def _call_part(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": arguments_object(arguments)}}


def content_parts(response: Response) -> list[dict[str, Any]]:
    """The answer as Gemini parts: the thought (its signature on it), the text, one part per function call."""
    message = response.message
    parts: list[dict[str, Any]] = []
    if message.reasoning_content:
        parts.append({"text": message.reasoning_content, "thought": True})
    if message.content:
        parts.append({"text": message.content})
    for call in message.tool_calls or ():
        parts.append(_call_part(call.id, call.name, call.arguments))
    if message.reasoning_signature and parts:
        parts[0]["thoughtSignature"] = message.reasoning_signature
    return parts


def _envelope(parts: list[dict[str, Any]], model: str, response_id: str) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
        "modelVersion": model,
        "responseId": response_id,
    }


def render(response: Response, model: str, request: EndpointRequest) -> dict[str, Any]:
    """A `GenerateContentResponse` for a `Response`."""
    body = _envelope(content_parts(response), model, response.id or f"resp_{token_hex(12)}")
    body["candidates"][0]["finishReason"] = _finish_reason(response)
    body["usageMetadata"] = _usage(response)
    return body


class StreamWriter:
    """Renders a streamed answer as `GenerateContentResponse` chunks: text and thought as they arrive, each
    function call whole (Gemini never splits one), the finish reason and usage on the last chunk."""

    keepalive = b": keepalive\n\n"

    def __init__(self, model: str, request: EndpointRequest, response_id: str | None = None) -> None:
        self.model = model
        self.id = response_id or f"resp_{token_hex(12)}"

    def _chunk(self, parts: list[dict[str, Any]]) -> bytes:
        return sse(_envelope(parts, self.model, self.id))

    def start(self) -> list[bytes]:
        return []

    def delta(self, delta: ResponseDelta) -> list[bytes]:
        if delta.reasoning_content:
            return [self._chunk([{"text": delta.reasoning_content, "thought": True}])]
        if delta.content:
            return [self._chunk([{"text": delta.content}])]
        return []  # function calls go out whole with the last chunk

    def finish(self, response: Response) -> list[bytes]:
        message = response.message
        parts = [_call_part(call.id, call.name, call.arguments) for call in message.tool_calls or ()]
        if message.reasoning_signature:
            parts = parts or [{"text": ""}]
            parts[0]["thoughtSignature"] = message.reasoning_signature
        body = _envelope(parts, self.model, self.id)
        body["candidates"][0]["finishReason"] = _finish_reason(response)
        body["usageMetadata"] = _usage(response)
        return [sse(body)]

    def error(self, status: int, message: str, type_: str, code: str | None) -> list[bytes]:
        return [sse(error_body(status, message, type_, code, None))]


def render_stream(response: Response, model: str, request: EndpointRequest) -> Iterator[bytes]:
    """A whole answer as Gemini's stream of chunks."""
    yield from replay(StreamWriter(model, request, response.id or None), response)


def error_body(status: int, message: str, type_: str, code: str | None, param: str | None) -> dict[str, Any]:
    """Google's error shape: ``{"error": {"code", "message", "status"}}``."""
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}}


def count_tokens(body: Any, model: str = "") -> dict[str, int]:
    """`:countTokens`: the contents (or the whole `generateContentRequest`) checked like a `generateContent`
    call, their size estimated (`estimate_tokens`) as `totalTokens`. Raises `BadRequest` like `parse_request`."""
    if isinstance(body, Mapping) and isinstance(_field(body, "generateContentRequest"), Mapping):
        body = _field(body, "generateContentRequest")
    return {"totalTokens": estimate_tokens(parse_request(body, model))}


DIALECT = Dialect(
    name="gemini",
    route=ROUTE,
    prefix=PREFIX,
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
    "PREFIX",
    "ROUTE",
    "StreamWriter",
    "count_tokens",
    "content_parts",
    "error_body",
    "parse_request",
    "render",
    "render_stream",
]
