"""The built-in server's wire format: request models (validated), and the pieces of OpenAI/vLLM-style answers.

Requests follow OpenAI's Chat Completions and Completions bodies plus vLLM's
extensions (`return_token_ids`, `top_k`, `stop_token_ids`, `ignore_eos`,
`include_stop_str_in_output`, `skip_special_tokens`, `chat_template_kwargs`,
`add_generation_prompt`, `continue_final_message`) and the token route's `tokens`
(the prompt as token ids). Unknown fields are ignored, as OpenAI-compatible servers
do; fields whose feature this server lacks are refused when set.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from v1._util import bounded_json as _bounded_json
from v1.inference._engine import SamplingParams

MAX_TOP_LOGPROBS = 20
UNSUPPORTED_FIELDS = {
    "logit_bias": "logit_bias",
    "presence_penalty": "presence/frequency penalties",
    "frequency_penalty": "presence/frequency penalties",
    "echo": "echo",
    "suffix": "suffix",
    "best_of": "best_of",
}


class RequestError(Exception):
    """A request the server refuses: answered in OpenAI's error shape with `status`."""

    def __init__(self, message: str, *, status: int = 400, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


class GenerationFields(BaseModel):
    """What Chat Completions and Completions requests share."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)
    n: int = Field(1, ge=1)
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def sampling_params(self, max_tokens: int, top_logprobs: int) -> SamplingParams:
        """The engine's `SamplingParams` for this request."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            stop=tuple(s for s in stop if s),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            top_logprobs=top_logprobs,
            include_stop_str_in_output=self.include_stop_str_in_output,
            skip_special_tokens=self.skip_special_tokens,
        )


class ChatRequest(GenerationFields):
    """A Chat Completions body (and the token route's, which may carry the prompt's ids as `tokens`)."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tokens: list[int] | None = None


class CompletionRequest(GenerationFields):
    """A Completions body: one prompt (text or token ids) or a list of them."""

    prompt: str | list[int] | list[str | list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


def parse_request(raw: bytes, model_type: type[GenerationFields]) -> Any:
    """The request body as `model_type`, or a `RequestError` naming the bad field."""
    try:
        body = _bounded_json.loads(raw, "the request body")
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    for name, feature in UNSUPPORTED_FIELDS.items():
        if body.get(name):
            raise RequestError(f"{feature} is not supported by the built-in inference server", param=name)
    try:
        return model_type.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "body"
        raise RequestError(f"{where}: {error['msg']}", param=where) from None


__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "GenerationFields",
    "RequestError",
    "parse_request",
]
