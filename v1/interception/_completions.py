"""The OpenAI (legacy) Completions dialect at the endpoint: a text prompt in, text out.

The canonical prompt is the string itself (v1's "completion mode" `Messages`).
`logprobs: N` becomes `logprobs: true, top_logprobs: N` in the canonical
(Chat Completions) sampling args.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from v1.interception._dialect import (
    BadRequest,
    Dialect,
    EndpointRequest,
    OpenAIChunkWriter,
    openai_completion_body,
    pick_sampling_args,
    replay,
    sse,
)
from v1.interception._dialect import openai_error_body as error_body
from v1.types import Response, ResponseDelta

ROUTE = "/completions"
SAMPLING = (
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repetition_penalty",
    "min_tokens",
)
"""The Completions API's sampling params (and vLLM's) that the endpoint forwards; `logprobs` is mapped."""
REFUSED = {
    "suffix": "'suffix' (fill-in-the-middle) is not supported by the endpoint",
    "echo": "'echo' is not supported by the endpoint: the trajectory records the completion only",
}


def parse_request(body: Any) -> EndpointRequest:
    """Validate a `/completions` body; raises `BadRequest` naming the bad parameter."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        raise BadRequest("'prompt' must be one string: token-id prompts and batches of prompts are not supported", "prompt")
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' is required and must be a string", "prompt")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a string", "model")
    if body.get("n") not in (None, 1) or body.get("best_of") not in (None, 1):
        raise BadRequest("n > 1 / best_of > 1 is not supported: a rollout's trajectory is one path", "n")
    for name, reason in REFUSED.items():
        if body.get(name):
            raise BadRequest(reason, name)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, Mapping):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    sampling_args = pick_sampling_args(body, SAMPLING)
    logprobs = body.get("logprobs")
    if logprobs is not None and logprobs is not False:
        if isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0:
            raise BadRequest("'logprobs' must be a non-negative integer", "logprobs")
        sampling_args["logprobs"] = True
        if logprobs:
            sampling_args["top_logprobs"] = logprobs
    return EndpointRequest(
        messages=prompt,
        tools=None,
        sampling_args=sampling_args,
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        model=model,
    )


def _finish_reason(response: Response) -> str:
    reason = response.message.finish_reason or "stop"
    return "length" if reason == "length" else "stop"


def _logprobs(response: Response) -> dict[str, Any] | None:
    tokens = response.message.tokens
    if tokens is None:
        return None
    return {
        "tokens": [f"token_id:{t}" for t in tokens.completion_ids],
        "token_logprobs": list(tokens.completion_logprobs),
        "top_logprobs": None,
        "text_offset": None,
    }


def _check_translatable(response: Response) -> None:
    if response.message.tool_calls:
        raise BadRequest("the model answered with tool calls, which the Completions API cannot carry", "tools")


def render(response: Response, model: str, request: EndpointRequest) -> dict[str, Any]:
    """A `text_completion` object for a `Response`."""
    _check_translatable(response)
    choice: dict[str, Any] = {
        "index": 0,
        "text": response.message.content or "",
        "finish_reason": _finish_reason(response),
        "logprobs": _logprobs(response),
    }
    body = openai_completion_body(response, model, object_name="text_completion", id_prefix="cmpl-", choice=choice)
    tokens = response.message.tokens
    if tokens is not None:
        choice["prompt_token_ids"] = list(tokens.prompt_ids)  # the answer's own: the step holds these lists
        choice["token_ids"] = list(tokens.completion_ids)
    return body


class StreamWriter(OpenAIChunkWriter):
    """Renders a streamed answer as `text_completion` SSE chunks, delta by delta."""

    id_prefix = "cmpl-"
    chunk_object = "text_completion"

    def _chunk(self, text: str, finish_reason: str | None = None) -> bytes:
        return sse({**self.base, "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}]})

    def start(self) -> list[bytes]:
        return []

    def delta(self, delta: ResponseDelta) -> list[bytes]:
        if delta.tool_call_index is not None:
            raise BadRequest("the model answered with tool calls, which the Completions API cannot carry", "tools")
        return [self._chunk(delta.content)] if delta.content else []

    def finish(self, response: Response) -> list[bytes]:
        _check_translatable(response)
        return [self._chunk("", _finish_reason(response)), *self.end(response)]


def render_stream(response: Response, model: str, request: EndpointRequest) -> Iterator[bytes]:
    """`text_completion` chunks (one per word), then the finish reason, usage if asked, and ``[DONE]``."""
    _check_translatable(response)
    writer = StreamWriter(model, request, response.id or None)
    writer.base["created"] = response.created
    yield from replay(writer, response)


DIALECT = Dialect(
    name="completions",
    route=ROUTE,
    parse_request=parse_request,
    render=render,
    render_stream=render_stream,
    stream_writer=StreamWriter,
    error_body=error_body,
)

__all__ = ["DIALECT", "ROUTE", "StreamWriter", "parse_request", "render", "render_stream"]
