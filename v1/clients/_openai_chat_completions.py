"""`openai_chat_completions`: the OpenAI Chat Completions API (OpenAI, vLLM, routers)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from v1.clients._answer_limits import bounded_http_client
from v1.clients._base import Client, StreamReader, describe_error, request_refused, split_create_args
from v1.clients._credentials import resolve_api_key
from v1.clients._http import async_client_class, http_library, is_async_openai, sdk_timeout
from v1.clients._openai_wire import OpenAIWire, sdk_headers
from v1.config import ClientConfig
from v1.errors import Error, InvalidModelResponseError, ModelError, OverlongPromptError
from v1.types import Messages, Response, ResponseDelta, ResponseTokens, SamplingArgs, Tool, Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI


@functools.cache
def create_params() -> frozenset[str]:
    """The keyword arguments of the SDK's `chat.completions.create` (the SDK is imported on first use)."""
    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self", "extra_body"}


@functools.cache
def _request_option_keys() -> frozenset[str]:
    """The keys of the SDK's public `openai.RequestOptions` (empty for an SDK without it: `create()` is used then)."""
    import openai

    options_type = getattr(openai, "RequestOptions", None)
    return frozenset(getattr(options_type, "__annotations__", {}))


OVERLONG_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
)
RETRYABLE_STATUSES = frozenset({408, 409, 429})
FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}

NativeMessage = dict[str, Any]
NativeTool = dict[str, Any]
NativeResponse = dict[str, Any]


def split_sampling_args(sampling_args: SamplingArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sampling args the SDK's `create()` takes by name, and the rest (sent as `extra_body`)."""
    return split_create_args(sampling_args, create_params())


def sdk_posts(client: Any) -> bool:
    """Whether `client` is an `AsyncOpenAI` whose `post` `post_options` can feed (the installed SDK's layout is known)."""
    return is_async_openai(client) and {"headers", "extra_json"} <= _request_option_keys()


def post_options(request: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """A `create()` request dict as the body and options of the SDK's `post`, as `create()` would make them.

    The body is JSON already (v1 builds it from canonical messages), so the SDK's per-call
    transform of `create()`'s typed parameters (a fifth of a call's CPU) has nothing to do.
    """
    body = {key: value for key, value in request.items() if key not in ("extra_body", "extra_headers")}
    options: dict[str, Any] = {}
    if request.get("extra_headers") is not None:
        options["headers"] = request["extra_headers"]
    if request.get("extra_body") is not None:
        options["extra_json"] = request["extra_body"]
    if "security" in _request_option_keys():
        options["security"] = {"bearer_auth": True}
    return body, options


def wire_request(request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str] | None]:
    """A `create()` request dict as the JSON body (`extra_body` merged in, as the SDK merges it) and extra headers."""
    body = {key: value for key, value in request.items() if key not in ("extra_body", "extra_headers")}
    if request.get("extra_body"):
        body.update(request["extra_body"])
    return body, request.get("extra_headers")


def is_request_refusal(status: int) -> bool:
    """A 4xx caused by the request itself: not auth (401/403), not a retryable 408/409/429."""
    return 400 <= status < 500 and status not in RETRYABLE_STATUSES and status not in (401, 403)


def _is_overlong(error: BaseException) -> bool:
    import openai

    if not isinstance(error, openai.BadRequestError):
        return False
    body = error.body if isinstance(error.body, dict) else {}
    text = f"{error.message} {body.get('code', '')} {body.get('message', '')}".lower()
    return any(marker in text for marker in OVERLONG_MARKERS)


def raise_for_upstream_error(response: Any, api: str) -> None:
    """Reject an answer that is not a JSON object, or that carries an OpenAI-style `error` field.

    Args:
        response: the decoded answer.
        api: the API's name as the error message should give it ("chat completions", ...).
    """
    if not isinstance(response, dict):
        raise InvalidModelResponseError(f"expected a JSON object from {api}, got {type(response).__name__}")
    if response.get("error"):
        raise ModelError(f"upstream returned an error: {response['error']}")


def usage_from_openai(usage: dict[str, Any] | None) -> Usage | None:
    """The `usage` object of an OpenAI Chat Completions or Completions answer as a `Usage`."""
    fields = usage_fields(usage)
    return None if fields is None else Usage(**fields)


def usage_fields(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of `usage_from_openai`'s `Usage`, not validated yet; None when the answer has no usage."""
    if not usage:
        return None
    return {
        "prompt_tokens": usage.get("prompt_tokens") or 0,
        "completion_tokens": usage.get("completion_tokens") or 0,
        "total_tokens": usage.get("total_tokens") or 0,
        "reasoning_tokens": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens"),
    }


def tokens_from_choice(data: NativeResponse, choice: dict[str, Any]) -> ResponseTokens | None:
    """Token ids (vLLM's `prompt_token_ids` / `token_ids`) and logprobs, when the server returned them."""
    prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    completion_ids = choice.get("token_ids")
    if prompt_ids is None or completion_ids is None:
        return None
    content = ((choice.get("logprobs") or {}).get("content")) or []
    logprobs = [float(item.get("logprob", 0.0)) for item in content]
    if len(logprobs) != len(completion_ids):
        logprobs = (logprobs + [0.0] * len(completion_ids))[: len(completion_ids)]
    return ResponseTokens(
        prompt_ids=list(prompt_ids),
        prompt_mask=[0] * len(prompt_ids),
        completion_ids=list(completion_ids),
        completion_mask=[1] * len(completion_ids),
        completion_logprobs=logprobs,
    )


CANONICAL_ONLY = frozenset({"is_error", "reasoning_signature"})
"""Keys of canonical messages that Chat Completions has no field for (kept on the trajectory, not sent)."""


def _wire_message(message: Any) -> Any:
    if not CANONICAL_ONLY.isdisjoint(message):
        return {key: value for key, value in message.items() if key not in CANONICAL_ONLY}
    return message


class StreamedCompletion:
    """Folds `chat.completion.chunk`s into the `chat.completion` they stream, emitting a `ResponseDelta` per piece."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.prompt_ids: list[int] | None = None
        self.token_ids: list[int] = []
        self.logprobs: list[dict[str, Any]] = []

    def add(self, chunk: dict[str, Any]) -> list[ResponseDelta]:
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_ids = list(chunk["prompt_token_ids"])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        deltas: list[ResponseDelta] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            if choice.get("prompt_token_ids") is not None:
                self.prompt_ids = list(choice["prompt_token_ids"])
            self.token_ids.extend(choice.get("token_ids") or ())
            self.logprobs.extend(((choice.get("logprobs") or {}).get("content")) or ())
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                self.reasoning.append(reasoning)
                deltas.append(ResponseDelta(reasoning_content=reasoning))
            if delta.get("content"):
                self.content.append(delta["content"])
                deltas.append(ResponseDelta(content=delta["content"]))
            for call in delta.get("tool_calls") or ():
                index = call.get("index", 0)
                function = call.get("function") or {}
                entry = self.calls.get(index)
                if entry is None:
                    entry = self.calls[index] = {"id": call.get("id") or f"call_{index}", "name": "", "arguments": ""}
                    deltas.append(
                        ResponseDelta(tool_call_index=index, tool_call_id=entry["id"], tool_call_name=function.get("name"))
                    )
                entry["name"] += function.get("name") or ""
                if function.get("arguments"):
                    entry["arguments"] += function["arguments"]
                    deltas.append(ResponseDelta(tool_call_index=index, tool_call_arguments=function["arguments"]))
        return deltas

    def read(self, event: Any) -> list[ResponseDelta]:
        """`add` for one chunk: its JSON, or one of the SDK's `ChatCompletionChunk`s."""
        return self.add(event if isinstance(event, dict) else event.model_dump(exclude_unset=True))

    def native(self) -> NativeResponse:
        """The `chat.completion` the chunks add up to; a stream that never said how it finished is not whole."""
        if self.finish_reason is None:
            raise InvalidModelResponseError(
                "the upstream's chat completion stream ended without a finish reason (truncated, or not a stream)"
            )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.content else None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())
            ]
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        if self.logprobs:
            choice["logprobs"] = {"content": self.logprobs}
        if self.prompt_ids is not None and self.token_ids:
            choice["token_ids"] = self.token_ids
        native: dict[str, Any] = {**self.head, "choices": [choice], "usage": self.usage}
        if self.prompt_ids is not None:
            native["prompt_token_ids"] = self.prompt_ids
        return native


class OpenAIChatCompletionsClient(Client["AsyncOpenAI", list[NativeMessage], NativeResponse, NativeTool]):
    """Chat Completions over the official `openai` SDK.

    Accepts an `AsyncOpenAI`, any object with the same `chat.completions.create`
    interface (a trainer's adapter, say), or a `ClientConfig`.
    """

    client_type = "openai_chat_completions"

    wire: OpenAIWire | None = None
    """Where requests go when this client built its SDK client from a `ClientConfig` (see `v1.clients`)."""

    def setup_client(self, config: ClientConfig) -> AsyncOpenAI:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(
            base_url=config.api_base_url,
            api_key=resolve_api_key(config.api_key_var),
            max_retries=0,  # v1 retries, so a retry is one decision in one place
            timeout=sdk_timeout(config),  # per request; without it the SDK's 600 s default overrides the pool's
            default_headers=config.extra_headers or None,
            http_client=bounded_http_client(async_client_class(), config),
        )
        self.wire = OpenAIWire(
            str(client.base_url),
            sdk_headers(client, client.api_key),
            timeout=config.timeout,
            connect_timeout=config.connect_wait,
            max_connections=config.max_connections,
            max_response_bytes=config.max_response_bytes,
            response_timeout=config.response_timeout,
        )
        return client

    def to_native_prompt(self, messages: Messages) -> tuple[list[NativeMessage], dict[str, Any]]:
        if isinstance(messages, str):
            return [{"role": "user", "content": messages}], {}
        return [_wire_message(message) for message in messages], {}

    def to_native_tool(self, tool: Tool) -> NativeTool:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        if tool.strict is not None:
            function["strict"] = tool.strict
        return {"type": "function", "function": function}

    async def get_native_response(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[NativeTool] | None,
        **kwargs: Any,
    ) -> NativeResponse:
        request = self._request(prompt, model, sampling_args, tools, kwargs.get("state"))
        if self.wire is not None:  # `_create_json`'s first case, without its coroutine
            body, headers = wire_request(request)
            return await self.wire.post("/chat/completions", body, headers)  # type: ignore[no-any-return]
        return await self._create_json(self.client.chat.completions, request, "/chat/completions")

    async def post_json(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> NativeResponse:
        """POST `body` to `path` under the upstream's base URL; the answer as JSON (over the wire, else the SDK's `post`)."""
        if self.wire is not None:
            return await self.wire.post(path, body, headers)  # type: ignore[no-any-return]
        answer = await self.client.post(
            path, body=body, cast_to=http_library().Response, options={"headers": headers} if headers else {}
        )
        return answer.json()  # type: ignore[no-any-return]

    async def _create_json(self, resource: Any, request: dict[str, Any], path: str | None = None) -> NativeResponse:
        """`resource.create(**request)`'s answer as JSON.

        Built from a config, the request is posted to `path` over `wire`. On an `AsyncOpenAI` the
        SDK's pydantic parse is skipped (we translate from the JSON directly), and with `path` its
        parameter transform too: the request goes through the SDK's own `post` (same headers, auth,
        timeouts and errors). Any other client's result is dumped.
        """
        if path is not None and self.wire is not None:
            body, headers = wire_request(request)
            return await self.wire.post(path, body, headers)  # type: ignore[no-any-return]
        if path is not None and sdk_posts(self.client):
            body, options = post_options(request)
            answer = await self.client.post(path, body=body, options=options, cast_to=http_library().Response)
            return answer.json()  # type: ignore[no-any-return]
        if is_async_openai(self.client):
            raw = await resource.with_raw_response.create(**request)
            return raw.http_response.json()  # type: ignore[no-any-return]
        result = await resource.create(**request)
        return result.model_dump() if hasattr(result, "model_dump") else dict(result)

    def _request(
        self, prompt: list[NativeMessage], model: str, sampling_args: SamplingArgs, tools: list[NativeTool] | None, state: Any
    ) -> dict[str, Any]:
        known, extra_body = split_sampling_args(sampling_args)
        headers = self.headers_from_state(state)
        request: dict[str, Any] = {**known, "model": model, "messages": prompt}
        if tools:
            request["tools"] = tools
        if extra_body:
            request["extra_body"] = extra_body
        if headers:
            request["extra_headers"] = headers
        return request

    def can_stream(self) -> bool:
        """Streams on an `AsyncOpenAI` with this class's own call; a subclass that changed the call does not."""
        return type(self).get_native_response is OpenAIChatCompletionsClient.get_native_response and is_async_openai(self.client)

    def stream_opener(
        self, prompt: list[NativeMessage], model: str, sampling_args: SamplingArgs, tools: list[NativeTool] | None, **kwargs: Any
    ) -> Callable[[], Awaitable[Any]]:
        request = self._request(prompt, model, sampling_args, tools, kwargs.get("state"))
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
        if self.wire is not None:
            body, headers = wire_request(request)
            wire = self.wire
            return lambda: wire.stream("/chat/completions", body, headers)
        if sdk_posts(self.client):
            from openai import AsyncStream

            body, options = post_options(request)
            # each chunk is relayed as the JSON it came as (`cast_to=object`), not parsed into a model
            return lambda: self.client.post(
                "/chat/completions", body=body, options=options, cast_to=object, stream=True, stream_cls=AsyncStream[object]
            )
        return lambda: self.client.chat.completions.create(**request)

    def stream_reader(self) -> StreamReader[NativeResponse]:
        return StreamedCompletion()

    def is_retryable(self, error: BaseException) -> bool:
        import openai

        if isinstance(error, (openai.APIConnectionError, openai.APITimeoutError)):
            return True
        if isinstance(error, openai.APIStatusError):
            return error.status_code in RETRYABLE_STATUSES or error.status_code >= 500
        return isinstance(error, (http_library().TransportError, ConnectionError, TimeoutError))

    def is_auth_error(self, error: BaseException) -> bool:
        import openai

        return isinstance(error, (openai.AuthenticationError, openai.PermissionDeniedError))

    def translate_error(self, error: BaseException) -> Error:
        import openai

        if _is_overlong(error):
            return OverlongPromptError(f"prompt too long for the model: {error}")
        if isinstance(error, openai.APIStatusError) and is_request_refusal(error.status_code):
            return request_refused(error.status_code, error.body, error.message)
        return ModelError(describe_error(error))

    def raise_from_native_response(self, response: NativeResponse) -> None:
        raise_for_upstream_error(response, "chat completions")
        choices = response.get("choices")
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            raise InvalidModelResponseError(f"chat completion has no usable choices: {str(response)[:200]}")

    def from_native_response(self, response: NativeResponse) -> Response:
        """The answer as a `Response`, validated in one pass over its fields (a nested model built
        and validated apiece costs as much again)."""
        choice = response["choices"][0]
        message = choice["message"]
        tool_calls = [
            {
                "id": call.get("id") or f"call_{i}",
                "name": call["function"]["name"],
                "arguments": call["function"].get("arguments") or "{}",
            }
            for i, call in enumerate(message.get("tool_calls") or [])
        ]
        finish_reason = FINISH_REASONS.get(choice.get("finish_reason") or "")
        return Response.model_validate(
            {
                "id": response.get("id") or "",
                "created": int(response.get("created") or time.time()),
                "model": response.get("model") or "",
                "usage": usage_fields(response.get("usage")),
                "message": {
                    "content": message.get("content"),
                    "reasoning_content": message.get("reasoning_content") or message.get("reasoning"),
                    "finish_reason": finish_reason,
                    "is_truncated": finish_reason == "length",
                    "tokens": tokens_from_choice(response, choice),
                    "tool_calls": tool_calls or None,
                },
            }
        )

    async def close(self) -> None:
        if self.wire is not None:
            await self.wire.close()
        if self._owns_client:
            await self.client.close()


__all__ = [
    "OpenAIChatCompletionsClient",
    "is_request_refusal",
    "post_options",
    "raise_for_upstream_error",
    "sdk_posts",
    "split_sampling_args",
    "wire_request",
]
