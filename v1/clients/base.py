"""`Client`: translate provider-agnostic prompts, tools and responses to one provider API."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from v1.config import ClientConfig
from v1.errors import Error, InvalidModelResponseError, ModelError
from v1.types import Messages, Response, ResponseDelta, SamplingArgs, Tool

logger = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
MessagesT = TypeVar("MessagesT")
ResponseT = TypeVar("ResponseT")
ToolT = TypeVar("ToolT")
T = TypeVar("T")
NativeT_co = TypeVar("NativeT_co", covariant=True)

RETRY_WAIT_INITIAL = 0.25
RETRY_WAIT_MAX = 30.0


def describe_error(error: BaseException) -> str:
    """``Type: message``, plus the root cause when the SDK wrapped one (e.g. which host refused)."""
    text = f"{type(error).__name__}: {error}"
    root, seen = error, {id(error)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    if root is not error and str(root) and str(root) not in text:
        text += f" (caused by {type(root).__name__}: {root})"
    return text


def select_thinking(messages: Messages, *, preserve_all: bool, between_tool_calls: bool) -> Messages:
    """The prompt with earlier turns' `reasoning_content` kept or dropped, per the `ClientConfig` flags.

    `preserve_all` keeps every turn's reasoning; `between_tool_calls` keeps it on the
    assistant turns after the last user message (an interleaved-thinking tool chain in
    progress); neither drops it from every earlier turn.
    """
    if preserve_all or isinstance(messages, str) or not any("reasoning_content" in m for m in messages):
        return messages
    keep_from = len(messages)
    if between_tool_calls:
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        keep_from = last_user + 1
    return [
        {k: v for k, v in m.items() if k != "reasoning_content"} if i < keep_from and "reasoning_content" in m else m
        for i, m in enumerate(messages)
    ]


def split_create_args(args: Mapping[str, Any], create_params: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`args` as the keywords the SDK's `create()` takes by name, and the rest (sent as `extra_body`).

    None values are dropped. A nested `extra_body` (the `sampling_args={"extra_body": {...}}`
    convention) is merged into the rest, not nested; top-level keys win.

    Args:
        args: sampling args, already in the provider's names.
        create_params: the names `create()` takes (without `extra_body`).
    """
    known = {k: v for k, v in args.items() if k in create_params and v is not None}
    extra = {k: v for k, v in args.items() if k not in create_params and k != "extra_body" and v is not None}
    nested = args.get("extra_body")
    if isinstance(nested, dict):
        extra = {**nested, **extra}
    return known, extra


class StreamReader(Protocol[NativeT_co]):
    """Folds one streamed answer's SDK events into the native response they add up to."""

    def read(self, event: Any) -> list[ResponseDelta]:
        """Take in one event; the deltas it carries, in order."""
        ...

    def native(self) -> NativeT_co:
        """The native response the events read so far add up to (raises if they are not a whole answer)."""
        ...


class Client(ABC, Generic[ClientT, MessagesT, ResponseT, ToolT]):
    """Wraps one provider SDK client and translates to and from v1's types.

    Built from a `ClientConfig`, the client owns its SDK client and retries
    retryable failures `config.max_retries` times (exponential backoff with
    jitter). Wrapping an existing SDK client object leaves retries to that object.
    """

    client_type: ClassVar[str]

    def __init__(self, client_or_config: ClientT | ClientConfig) -> None:
        if isinstance(client_or_config, ClientConfig):
            self.config: ClientConfig | None = client_or_config
            self._client = self.setup_client(client_or_config)
            self._owns_client = True
        else:
            self.config = None
            self._client = client_or_config
            self._owns_client = False

    @property
    def client(self) -> ClientT:
        """The underlying SDK client."""
        return self._client

    @property
    def max_retries(self) -> int:
        return self.config.max_retries if self.config is not None else 0

    def prepare(self, prompt: Messages, tools: list[Tool] | None) -> tuple[MessagesT, dict[str, Any], list[ToolT] | None]:
        """The prompt (thinking kept or dropped per the config) and tools in the provider's format."""
        if self.config is not None:
            prompt = select_thinking(
                prompt,
                preserve_all=self.config.preserve_all_thinking,
                between_tool_calls=self.config.preserve_thinking_between_tool_calls,
            )
        native_prompt, extra = self.to_native_prompt(prompt)
        native_tools = [self.to_native_tool(tool) for tool in tools] if tools else None
        return native_prompt, extra, native_tools

    async def call_with_retries(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run `call`, retrying retryable failures; failures become v1 errors (auth errors pass unchanged)."""
        try:
            if self.max_retries == 0:
                return await call()
            retrying = AsyncRetrying(
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential_jitter(multiplier=RETRY_WAIT_INITIAL, max=RETRY_WAIT_MAX, jitter=RETRY_WAIT_INITIAL),
                retry=retry_if_exception(self.is_retryable),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    return await call()
        except Error:
            raise
        except Exception as exc:
            raise self.wrap_error(exc) from exc
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def wrap_error(self, error: Exception) -> Exception:
        """The exception to raise for a provider failure: auth errors unchanged, else `translate_error`."""
        if self.is_auth_error(error):
            return error
        return self.translate_error(error)

    def to_response(self, native: ResponseT) -> Response:
        """Check and translate a native response."""
        self.raise_from_native_response(native)
        try:
            return self.from_native_response(native)
        except Error:
            raise
        except Exception as exc:  # a malformed response (a tool call without `function`, say) is the upstream's fault
            raise InvalidModelResponseError(f"cannot read the model's response: {type(exc).__name__}: {exc}") from exc

    async def get_response(
        self,
        prompt: Messages,
        model: str,
        sampling_args: SamplingArgs,
        tools: list[Tool] | None = None,
        **kwargs: Any,
    ) -> Response:
        """Call the model and return a provider-agnostic `Response`.

        Raises:
            OverlongPromptError: the prompt does not fit the model's context.
            ModelError: any other failure, after retries (authentication errors surface unchanged).
        """
        native_prompt, extra, native_tools = self.prepare(prompt, tools)
        native = await self.call_with_retries(
            lambda: self.get_native_response(native_prompt, model, sampling_args, native_tools, **extra, **kwargs)
        )
        return self.to_response(native)

    async def stream_response(
        self,
        prompt: Messages,
        model: str,
        sampling_args: SamplingArgs,
        tools: list[Tool] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ResponseDelta | Response]:
        """Call the model, yielding `ResponseDelta`s as they arrive and the complete `Response` last.

        Where `can_stream()` is false, only the `Response` is yielded (no incremental
        output). Otherwise the stream is opened by `stream_opener` and read by a
        `stream_reader`; retries cover opening the stream only: once a delta was
        relayed, a failure is final. The complete `Response` is built from the
        events exactly as from a non-streamed answer. Raises like `get_response`.
        """
        if not self.can_stream():
            yield await self.get_response(prompt, model, sampling_args, tools, **kwargs)
            return
        native_prompt, extra, native_tools = self.prepare(prompt, tools)
        events = await self.call_with_retries(
            self.stream_opener(native_prompt, model, sampling_args, native_tools, **extra, **kwargs)
        )
        reader = self.stream_reader()
        try:
            async for event in events:
                for delta in reader.read(event):
                    yield delta
        except Error:
            raise
        except Exception as exc:
            raise self.wrap_error(exc) from exc
        yield self.to_response(reader.native())

    def can_stream(self) -> bool:
        """Whether `stream_response` streams from the provider; false unless a client implements streaming."""
        return False

    def stream_opener(
        self, prompt: MessagesT, model: str, sampling_args: SamplingArgs, tools: list[ToolT] | None, **kwargs: Any
    ) -> Callable[[], Awaitable[AsyncIterable[Any]]]:
        """The call that opens a streamed provider call (repeated on a retryable failure), its request built once."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def stream_reader(self) -> StreamReader[ResponseT]:
        """A fresh reader for one streamed answer's events."""
        raise NotImplementedError(f"{type(self).__name__} does not stream")

    def headers_from_state(self, state: Any) -> dict[str, str]:
        """`ClientConfig.extra_headers_from_state`: header -> the state field's value (e.g. `X-Session-ID` from `example_id`)."""
        if self.config is None or state is None:
            return {}
        return {
            header: str(state.get(field))
            for header, field in self.config.extra_headers_from_state.items()
            if state.get(field) is not None
        }

    def is_retryable(self, error: BaseException) -> bool:
        """Whether a failed call is worth repeating (connection errors, timeouts, 408/409/429/5xx)."""
        return False

    def is_auth_error(self, error: BaseException) -> bool:
        """Authentication/permission errors surface unchanged, never wrapped."""
        return False

    def translate_error(self, error: BaseException) -> Error:
        """The v1 error for a provider failure; `ModelError` unless a subclass knows better."""
        return ModelError(describe_error(error))

    @abstractmethod
    def setup_client(self, config: ClientConfig) -> ClientT:
        """Create the native SDK client from a `ClientConfig`."""

    @abstractmethod
    def to_native_prompt(self, messages: Messages) -> tuple[MessagesT, dict[str, Any]]:
        """Messages -> the provider's prompt, plus extra keyword arguments for the call."""

    @abstractmethod
    def to_native_tool(self, tool: Tool) -> ToolT:
        """A `Tool` in the provider's format."""

    @abstractmethod
    async def get_native_response(
        self, prompt: MessagesT, model: str, sampling_args: SamplingArgs, tools: list[ToolT] | None, **kwargs: Any
    ) -> ResponseT:
        """Call the provider API."""

    @abstractmethod
    def raise_from_native_response(self, response: ResponseT) -> None:
        """Raise `ModelError` (or a subclass) when the response can't be used."""

    @abstractmethod
    def from_native_response(self, response: ResponseT) -> Response:
        """The provider's response as a `Response`."""

    async def close(self) -> None:
        """Close the SDK client, if this client created it."""


__all__ = ["Client", "StreamReader", "describe_error", "select_thinking", "split_create_args"]
