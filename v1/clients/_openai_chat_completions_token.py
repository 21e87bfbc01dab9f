"""`openai_chat_completions_token`: the vLLM-style token route (``POST /chat/completions/tokens``).

The server applies the chat template and returns the prompt's and the
completion's token ids (`prompt_token_ids`, `choices[0].token_ids`) and the
completion's logprobs with every answer; this client asks for both and fails
(`InvalidModelResponseError`) when they are missing, so a training run never
silently records a step without tokens.
"""

from __future__ import annotations

from typing import Any

from v1.clients._http import is_async_openai
from v1.clients._openai_chat_completions import (
    NativeMessage,
    NativeResponse,
    NativeTool,
    OpenAIChatCompletionsClient,
    split_sampling_args,
)
from v1.errors import InvalidModelResponseError
from v1.types import SamplingArgs

TOKEN_ROUTE = "/chat/completions/tokens"


class OpenAIChatCompletionsTokenClient(OpenAIChatCompletionsClient):
    """Chat Completions on the token route, over the official `openai` SDK's HTTP layer."""

    client_type = "openai_chat_completions_token"

    async def get_native_response(
        self,
        prompt: list[NativeMessage],
        model: str,
        sampling_args: SamplingArgs,
        tools: list[NativeTool] | None,
        **kwargs: Any,
    ) -> NativeResponse:
        known, extra_body = split_sampling_args(sampling_args)
        body: dict[str, Any] = {**extra_body, "model": model, "messages": prompt, **known, "return_token_ids": True}
        body.setdefault("logprobs", True)
        if tools:
            body["tools"] = tools
        headers = self.headers_from_state(kwargs.get("state"))
        if self.wire is None and not is_async_openai(self.client):
            raise InvalidModelResponseError("openai_chat_completions_token needs an AsyncOpenAI client")
        return await self.post_json(TOKEN_ROUTE, body, headers or None)

    def raise_from_native_response(self, response: NativeResponse) -> None:
        super().raise_from_native_response(response)
        choice = response["choices"][0]
        if (response.get("prompt_token_ids") or choice.get("prompt_token_ids")) is None or choice.get("token_ids") is None:
            raise InvalidModelResponseError(
                f"the token route answered without prompt_token_ids / token_ids: {str(response)[:200]}"
            )


__all__ = ["TOKEN_ROUTE", "OpenAIChatCompletionsTokenClient"]
