"""`Client`: translate provider-agnostic prompts, tools and responses to one provider API."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, Union

from v1.config import ClientConfig
from v1.errors import Error, InvalidModelResponseError, ModelError, ModelRequestError
from v1.types import Messages, Response, ResponseDelta, SamplingArgs, Tool

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
MessagesT = TypeVar("MessagesT")
ResponseT = TypeVar("ResponseT")
ToolT = TypeVar("ToolT")
T = TypeVar("T")
NativeT_co = TypeVar("NativeT_co", covariant=True)

RETRY_WAIT_INITIAL = 0.25
RETRY_WAIT_MAX = 30.0
RETRY_AFTER_MAX = 60.0
"""The longest `Retry-After` honoured; a longer one is waited for this long."""

RetryObserver = Callable[[BaseException], None]
"""Called with the failure each time a client repeats a call (for counting retries)."""

TRANSPORT_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
"""`create()` keywords that change how a request travels, never taken from sampling args."""
REQUEST_FIELDS = frozenset(
    {"model", "messages", "prompt", "input", "instructions", "system", "tools", "functions", "stream", "stream_options"}
    | {"previous_response_id", "conversation", "store", "background", "n", "best_of", "echo", "suffix"}
)
"""What a request says besides sampling: the client sets these itself, never from sampling args."""
_NOT_SAMPLING = TRANSPORT_OPTIONS | REQUEST_FIELDS


def retry_after(error: BaseException) -> float | None:
    """Seconds the upstream asked to wait (`retry-after-ms`, `retry-after` in seconds or as a date), if it said."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            delay = float(value) / divisor
        except ValueError:
            parsed = email.utils.parsedate_tz(value) if header == "retry-after" else None
            if parsed is None:
                continue
            delay = email.utils.mktime_tz(parsed) - time.time()
        return max(0.0, delay) if math.isfinite(delay) else RETRY_AFTER_MAX
    return None


def backoff_seconds(attempt: int, error: BaseException) -> float:
    """The wait before retry number `attempt + 1`: the upstream's `Retry-After` (capped), else exponential with jitter."""
    asked = retry_after(error)
    if asked is not None:
        return min(asked, RETRY_AFTER_MAX)
    return min(RETRY_WAIT_INITIAL * 2**attempt, RETRY_WAIT_MAX) + random.uniform(0, RETRY_WAIT_INITIAL)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)


def redact_locations(text: str, locations: list[str]) -> str:
    """`text` without URLs or any of `locations` (hosts, ``host:port``): error bodies never name the upstream."""
    text = _URL.sub("<upstream>", text)
    for location in sorted(locations, key=len, reverse=True):
        if len(location) >= 4:
            text = text.replace(location, "<upstream>")
    return text


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
        {k: v for k, v in m.items() if k not in ("reasoning_content", "reasoning_signature")}
        if i < keep_from and "reasoning_content" in m
        else m
        for i, m in enumerate(messages)
    ]


def split_create_args(args: Mapping[str, Any], create_params: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`args` as the keywords the SDK's `create()` takes by name, and the rest (sent as `extra_body`).

    None values are dropped. A nested `extra_body` (the `sampling_args={"extra_body": {...}}`
    convention) is merged into the rest, not nested; top-level keys win. Transport options
    (`extra_headers`, `extra_query`, `timeout`) are never taken from sampling args, and a key
    the request itself sets (`REQUEST_FIELDS`: `model`, `messages`, ...) is dropped, nested or not.

    Args:
        args: sampling args, already in the provider's names.
        create_params: the names `create()` takes (without `extra_body`).
    """
    refused = _NOT_SAMPLING
    known = {k: v for k, v in args.items() if k in create_params and k not in refused and v is not None}
    extra = {k: v for k, v in args.items() if k not in create_params and k not in refused and v is not None}
    nested = args.get("extra_body")
    if isinstance(nested, dict):
        extra = {**{k: v for k, v in nested.items() if k not in refused and v is not None}, **extra}
    return known, extra


class StreamReader(Protocol[NativeT_co]):
    """Folds one streamed answer's SDK events into the native response they add up to."""

    def read(self, event: Any) -> list[ResponseDelta]:
        """Take in one event; the deltas it carries, in order."""
        ...

    def native(self) -> NativeT_co:
        """The native response the events read so far add up to (raises if they are not a whole answer)."""
        ...


def _resolved(reader: StreamReader[T]) -> Callable[[], Awaitable[T]]:
    async def native() -> T:
        return reader.native()

    return native


def _undecodable(error: ValueError) -> InvalidModelResponseError:
    """A 200 answer whose body did not decode (`json.JSONDecodeError`): an unusable answer, retried as one."""
    return InvalidModelResponseError(f"the model's answer is not valid JSON: {error}")


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

    async def before_retry(self, error: Exception, attempt: int, on_retry: RetryObserver | None) -> None:
        """Wait before repeating a call that failed with `error`, or raise it as a v1 error when it is final.

        A failure is repeated while retries are left and `retryable(error)`; the wait honours the
        upstream's `Retry-After` (capped at `RETRY_AFTER_MAX`), else backs off exponentially with jitter.
        A v1 error that an SDK wrapped (an answer past its limits, raised beneath the SDK) is that error.
        """
        if not isinstance(error, Error) and isinstance(error.__cause__, Error):
            error = error.__cause__
        if attempt >= self.max_retries or not self.retryable(error):
            if isinstance(error, Error):
                raise error
            raise self.wrap_error(error) from error
        if on_retry is not None:
            on_retry(error)
        delay = backoff_seconds(attempt, error)
        logger.debug("retrying a model call in %.2fs after %s", delay, describe_error(error))
        await asyncio.sleep(delay)

    def retryable(self, error: BaseException) -> bool:
        """`is_retryable`, plus the failures every client shares: an unusable answer is worth asking again."""
        if isinstance(error, Error):
            return isinstance(error, InvalidModelResponseError)
        return self.is_retryable(error)

    def wrap_error(self, error: Exception) -> Exception:
        """The exception to raise for a provider failure: auth errors unchanged, else `translate_error`."""
        if self.is_auth_error(error):
            return error
        return self.translate_error(error)

    def to_response(self, native: ResponseT) -> Response:
        """Check and translate a native response."""
        try:
            self.raise_from_native_response(native)
            return self.from_native_response(native)
        except Error:
            raise
        except Exception as exc:  # a malformed response (a tool call without `function`, say) is the upstream's fault
            raise InvalidModelResponseError(f"cannot read the model's response: {type(exc).__name__}: {exc}") from exc

    async def native_once(self, call: Callable[[], Awaitable[ResponseT]]) -> Response:
        """One attempt: the provider call and its translation (a body that is not JSON is an unusable answer)."""
        try:
            native = await call()
        except Error:
            raise
        except ValueError as exc:
            raise _undecodable(exc) from exc
        return self.to_response(native)

    async def get_response(
        self,
        prompt: Messages,
        model: str,
        sampling_args: SamplingArgs,
        tools: list[Tool] | None = None,
        **kwargs: Any,
    ) -> Response:
        """Call the model and return a provider-agnostic `Response`.

        An unusable answer (malformed JSON, no choices) is retried like a connection error.
        `on_retry` (a keyword argument) is called with the failure before each retry.

        Raises:
            OverlongPromptError: the prompt does not fit the model's context.
            ModelRequestError: the upstream refused the request itself (4xx); not retried.
            ModelError: any other failure, after retries (authentication errors surface unchanged).
        """
        on_retry: RetryObserver | None = kwargs.pop("on_retry", None)
        native_prompt, extra, native_tools = self.prepare(prompt, tools)
        attempt = 0
        while True:  # one attempt (`native_once`) at a time, written out: no coroutine or closure per layer
            try:
                try:
                    native = await self.get_native_response(native_prompt, model, sampling_args, native_tools, **extra, **kwargs)
                except Error:
                    raise
                except ValueError as exc:
                    raise _undecodable(exc) from exc
                return self.to_response(native)
            except Exception as exc:
                await self.before_retry(exc, attempt, on_retry)
                attempt += 1

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
        `stream_reader`. A stream that ends before the answer is whole (no finish
        reason, no terminal event, a non-SSE body) is an `InvalidModelResponseError`.
        Failures are retried exactly like `get_response`'s as long as no delta was
        yielded (opening the stream, a stream that broke or ended empty); once a
        delta was relayed, a failure is final. The complete `Response` is built from
        the events exactly as from a non-streamed answer. Raises like `get_response`.
        """
        if not self.can_stream():
            yield await self.get_response(prompt, model, sampling_args, tools, **kwargs)
            return
        on_retry: RetryObserver | None = kwargs.pop("on_retry", None)
        native_prompt, extra, native_tools = self.prepare(prompt, tools)
        opener = self.stream_opener(native_prompt, model, sampling_args, native_tools, **extra, **kwargs)
        attempt = 0
        while True:
            relayed = False
            events: Any = None
            try:
                events = await opener()
                reader = self.stream_reader()
                async for event in events:
                    for delta in reader.read(event):
                        relayed = True
                        yield delta
                response = await self.native_once(_resolved(reader))
            except Exception as exc:
                if relayed:
                    raise exc if isinstance(exc, Error) else self.wrap_error(exc) from exc
                await self.before_retry(exc, attempt, on_retry)
                attempt += 1
                continue
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    try:
                        await close()
                    except Exception:  # the stream is over either way
                        logger.debug("closing an upstream stream failed", exc_info=True)
            yield response
            return

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

    def upstream_locations(self) -> list[str]:
        """The upstream's URLs, ``host:port``s and hosts (redacted from error bodies the endpoint sends)."""
        urls = [self.config.api_base_url, *(c.api_base_url for c in self.config.endpoint_configs)] if self.config else []
        base_url = getattr(self._client, "base_url", None)
        if base_url is not None:
            urls.append(str(base_url))
        return url_locations(urls)

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


def request_refused(status: int, body: Any, message: str) -> ModelRequestError:
    """A `ModelRequestError` for an upstream 4xx: its status and the upstream's own error message."""
    detail = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(detail, dict):
        detail = detail.get("message") or detail
    return ModelRequestError(f"the upstream refused the request ({status}): {detail or message}", status_code=status)


def url_locations(urls: list[str]) -> list[str]:
    """Each URL with its ``host:port`` and host, for `redact_locations`."""
    from urllib.parse import urlsplit

    locations: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        locations += [url.rstrip("/"), parts.netloc, parts.hostname or ""]
        if parts.hostname and parts.port:  # socket errors name the address as a tuple
            locations += [f"('{parts.hostname}', {parts.port})", f"{parts.hostname}:{parts.port}"]
    return [location for location in dict.fromkeys(locations) if location]


ClientLike = Union[Client[Any, Any, Any, Any], ClientConfig, Mapping[str, object], "AsyncOpenAI", "AsyncAnthropic"]
"""What a `client=` argument takes: a v1 `Client`, a `ClientConfig` (or mapping), or an SDK client to wrap."""


__all__ = [
    "RETRY_AFTER_MAX",
    "Client",
    "RetryObserver",
    "StreamReader",
    "backoff_seconds",
    "describe_error",
    "redact_locations",
    "request_refused",
    "retry_after",
    "select_thinking",
    "split_create_args",
    "url_locations",
    "ClientLike",
]
