"""`openai_completions`: the legacy OpenAI Completions API (text in, text out; vLLM, base models)."""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any

from v1.clients._base import split_create_args
from v1.clients._openai_chat_completions import (
    FINISH_REASONS,
    OpenAIChatCompletionsClient,
    raise_for_upstream_error,
    usage_from_openai,
)
from v1.errors import InvalidModelResponseError, NotSupportedError
from v1.types import Messages, Response, ResponseMessage, ResponseTokens, SamplingArgs, Tool


@functools.cache
def create_params() -> frozenset[str]:
    """The keyword arguments of the SDK's `completions.create` (the SDK is imported on first use)."""
    from openai.resources.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self", "extra_body"}


NativeResponse = dict[str, Any]


def completions_sampling_args(sampling_args: SamplingArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """Canonical (Chat Completions) sampling args as Completions `create()` keywords and `extra_body`.

    `logprobs: true` (+ `top_logprobs: N`) becomes `logprobs: N` (0 when no alternatives were asked for).
    """
    args = {k: v for k, v in sampling_args.items() if v is not None}
    if "max_completion_tokens" in args:
        args.setdefault("max_tokens", args.pop("max_completion_tokens"))
    logprobs = args.pop("logprobs", None)
    top = args.pop("top_logprobs", None)
    if logprobs is True or isinstance(top, int):
        args["logprobs"] = int(top or 0)
    elif isinstance(logprobs, int) and not isinstance(logprobs, bool):
        args["logprobs"] = logprobs
    return split_create_args(args, create_params())


def _tokens(choice: dict[str, Any]) -> ResponseTokens | None:
    prompt_ids = choice.get("prompt_token_ids")
    completion_ids = choice.get("token_ids")
    if prompt_ids is None or completion_ids is None:
        return None
    logprobs = [float(lp or 0.0) for lp in ((choice.get("logprobs") or {}).get("token_logprobs") or [])]
    logprobs = (logprobs + [0.0] * len(completion_ids))[: len(completion_ids)]
    return ResponseTokens(
        prompt_ids=list(prompt_ids),
        prompt_mask=[0] * len(prompt_ids),
        completion_ids=list(completion_ids),
        completion_mask=[1] * len(completion_ids),
        completion_logprobs=logprobs,
    )


class OpenAICompletionsClient(OpenAIChatCompletionsClient):
    """Completions over the official `openai` SDK: the prompt is one string.

    Chat messages and tools cannot be sent (there is no chat template on this
    route): they raise `NotSupportedError`, which the endpoint answers with 400.
    Use `openai_chat_completions` or `openai_chat_completions_token` for chat.
    """

    client_type = "openai_completions"

    def to_native_prompt(self, messages: Messages) -> tuple[Any, dict[str, Any]]:
        if isinstance(messages, str):
            return messages, {}
        raise NotSupportedError(
            "chat messages cannot be sent to an openai_completions upstream (it takes one text prompt and applies no chat "
            "template); use the Completions API at the endpoint, or an openai_chat_completions upstream"
        )

    def to_native_tool(self, tool: Tool) -> Any:
        raise NotSupportedError("tools cannot be sent to an openai_completions upstream: the Completions API has no tools")

    async def get_native_response(
        self, prompt: Any, model: str, sampling_args: SamplingArgs, tools: Any, **kwargs: Any
    ) -> NativeResponse:
        known, extra_body = completions_sampling_args(sampling_args)
        request: dict[str, Any] = {**known, "model": model, "prompt": prompt}
        if extra_body:
            request["extra_body"] = extra_body
        headers = self.headers_from_state(kwargs.get("state"))
        if headers:
            request["extra_headers"] = headers
        return await self._create_json(self.client.completions, request, "/completions")

    def raise_from_native_response(self, response: NativeResponse) -> None:
        raise_for_upstream_error(response, "completions")
        choices = response.get("choices")
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("text"), str):
            raise InvalidModelResponseError(f"completion has no usable choices: {str(response)[:200]}")

    def from_native_response(self, response: NativeResponse) -> Response:
        choice = response["choices"][0]
        finish_reason = FINISH_REASONS.get(choice.get("finish_reason") or "") or "stop"
        return Response(
            id=response.get("id") or "",
            created=int(response.get("created") or time.time()),
            model=response.get("model") or "",
            usage=usage_from_openai(response.get("usage")),
            message=ResponseMessage(
                content=choice["text"],
                finish_reason=finish_reason,  # type: ignore[arg-type]
                is_truncated=finish_reason == "length",
                tokens=_tokens(choice),
            ),
        )


__all__ = ["OpenAICompletionsClient", "completions_sampling_args"]
