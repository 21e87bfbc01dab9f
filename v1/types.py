"""Provider-agnostic data types shared by every part of v1.

Messages are plain OpenAI chat dicts (JSON in, JSON out). Model-facing values
(`Tool`, `ToolCall`, `Response`) are pydantic models; per-rollout records that
end up on disk (`TrajectoryStep`, `RolloutOutput`, ...) are TypedDicts of JSON.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, computed_field

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover
    from typing_extensions import NotRequired, TypedDict

ChatMessage = dict[str, Any]
"""An OpenAI chat message dict: `role`, `content`, optional `tool_calls` / `tool_call_id`."""

Messages = Union[str, list[ChatMessage]]
"""A plain string (completion mode) or a list of chat messages."""

Info = dict[str, Any]
SamplingArgs = dict[str, Any]

MessageType = Literal["chat", "completion"]
"""How a classic environment talks to the model: chat messages, or a text completion."""

ClientType = Literal[
    "openai_completions",
    "openai_chat_completions",
    "openai_chat_completions_token",
    "openai_responses",
    "renderer",
    "anthropic_messages",
    "nemorl_chat_completions",
]

FinishReason = Literal["stop", "length", "tool_calls"]


EMPTY_PARAMETERS: dict[str, object] = {"type": "object", "properties": {}}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Tool(_Model):
    """A provider-agnostic tool definition; each client converts it to its native format."""

    name: str
    description: str = ""
    parameters: dict[str, object] = Field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    strict: bool | None = None


class ToolCall(_Model):
    """One tool call made by the model. `arguments` is the raw JSON string it produced."""

    id: str
    name: str
    arguments: str


class Usage(_Model):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int | None = None


class ResponseTokens(_Model):
    """Token ids and logprobs of one model call, when the server returns them."""

    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    routed_experts: list[list[list[int]]] | None = None


class ResponseMessage(_Model):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning_signature: str | None = None
    """The provider's signature of the reasoning (Anthropic thinking), to be sent back with it unchanged."""
    finish_reason: FinishReason | None = None
    is_truncated: bool | None = None
    tokens: ResponseTokens | None = None
    tool_calls: list[ToolCall] | None = None

    def to_chat_message(self) -> ChatMessage:
        """The assistant message as an OpenAI chat dict."""
        message: ChatMessage = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.reasoning_signature:
            message["reasoning_signature"] = self.reasoning_signature
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in self.tool_calls
            ]
        return message


class ResponseDelta(_Model):
    """One increment of a streamed answer: text, reasoning, or a fragment of tool call `index`.

    A tool call's first fragment carries its `tool_call_id` and `tool_call_name`;
    `tool_call_arguments` fragments concatenate to its JSON arguments.
    """

    content: str | None = None
    reasoning_content: str | None = None
    reasoning_signature: str | None = None
    tool_call_index: int | None = None
    tool_call_id: str | None = None
    tool_call_name: str | None = None
    tool_call_arguments: str | None = None


class Response(_Model):
    """A provider-agnostic model response; every `Client` returns one."""

    id: str
    created: int
    model: str
    usage: Usage | None = None
    message: ResponseMessage


class TrajectoryStepTokens(TypedDict):
    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    overlong_prompt: bool
    is_truncated: bool
    routed_experts: list[list[list[int]]] | None
    multi_modal_data: NotRequired[Any]


class TrajectoryStep(TypedDict):
    """One model call of a rollout, as recorded by the interception endpoint."""

    prompt: Messages
    completion: Messages
    response: dict[str, Any]
    tokens: TrajectoryStepTokens | None
    reward: float | None
    advantage: float | None
    is_truncated: bool
    trajectory_id: str
    extras: dict[str, Any]


class TimeSpan(_Model):
    """A timed span in Unix seconds; `duration = end - start`."""

    start: float = 0.0
    end: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


class TimeSpans(_Model):
    """Several spans; `duration` is their sum."""

    spans: list[TimeSpan] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration(self) -> float:
        return sum(span.duration for span in self.spans)


class RolloutTiming(_Model):
    """Rollout-level timing, in seconds.

    `total = scoring.end - generation.start`; `overhead` is the part of `total`
    not spent in setup, model calls, environment (tool) work or scoring.
    """

    start_time: float = 0.0
    setup: TimeSpan = Field(default_factory=TimeSpan)
    generation: TimeSpan = Field(default_factory=TimeSpan)
    scoring: TimeSpan = Field(default_factory=TimeSpan)
    model: TimeSpans = Field(default_factory=TimeSpans)
    env: TimeSpans = Field(default_factory=TimeSpans)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        end = self.scoring.end or self.generation.end
        return max(0.0, end - self.generation.start) if self.generation.start else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def overhead(self) -> float:
        named = self.setup.duration + self.model.duration + self.env.duration + self.scoring.duration
        return max(0.0, self.total - named)

    def as_dict(self) -> dict[str, Any]:
        """`model_dump()`'s value, built directly: every rollout's state is finalized with it."""

        def span(part: TimeSpan) -> dict[str, float]:
            return {"start": part.start, "end": part.end, "duration": part.duration}

        def spans(part: TimeSpans) -> dict[str, Any]:
            return {"spans": [span(item) for item in part.spans], "duration": part.duration}

        return {
            "start_time": self.start_time,
            "setup": span(self.setup),
            "generation": span(self.generation),
            "scoring": span(self.scoring),
            "model": spans(self.model),
            "env": spans(self.env),
            "total": self.total,
            "overhead": self.overhead,
        }


class TokenUsage(TypedDict, total=False):
    input_tokens: float
    output_tokens: float
    final_input_tokens: float
    final_output_tokens: float


class RolloutOutput(dict):  # type: ignore[type-arg]
    """One rollout, serialized: JSON-only, with typed access to the known fields."""


class VersionInfo(TypedDict):
    vf_version: str
    vf_commit: str | None
    env_version: str | None
    env_commit: str | None


class GenerateMetadata(TypedDict):
    env_id: str
    name: NotRequired[str]
    env_args: dict[str, Any]
    model: str
    base_url: str
    num_examples: int
    rollouts_per_example: int
    sampling_args: SamplingArgs
    date: str
    time_ms: float
    avg_reward: float
    avg_metrics: dict[str, float]
    avg_error: float
    pass_at_k: dict[str, float]
    pass_all_k: dict[str, float]
    pass_threshold: float
    usage: TokenUsage | None
    version_info: VersionInfo
    state_columns: list[str]
    path_to_save: str
    tools: list[dict[str, Any]] | None
    # v1's additions (see docs/evaluation.md)
    num_rollouts: NotRequired[int]
    num_errors: NotRequired[int]
    num_retries: NotRequired[int]
    num_model_retries: NotRequired[int]
    model_retry_types: NotRequired[dict[str, int]]
    error_types: NotRequired[dict[str, int]]
    stop_conditions: NotRequired[dict[str, int]]
    total_usage: NotRequired[dict[str, float]]
    avg_timing: NotRequired[dict[str, float]]
    independent_scoring: NotRequired[bool]
    max_retries: NotRequired[int]
    scoring: NotRequired[dict[str, Any]]


ToolContent = str | list[dict[str, Any]]
"""Tool-message content: a string, or a list of OpenAI content parts when there are images."""


class GenerateOutputs(TypedDict):
    outputs: list[RolloutOutput]
    metadata: GenerateMetadata


__all__ = [
    "ChatMessage",
    "ClientType",
    "FinishReason",
    "GenerateMetadata",
    "GenerateOutputs",
    "Info",
    "Messages",
    "Response",
    "ResponseDelta",
    "ResponseMessage",
    "ResponseTokens",
    "RolloutOutput",
    "RolloutTiming",
    "SamplingArgs",
    "TimeSpan",
    "TimeSpans",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolContent",
    "TrajectoryStep",
    "TrajectoryStepTokens",
    "Usage",
    "VersionInfo",
    "MessageType",
]
