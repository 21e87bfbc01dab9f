"""How much of one upstream answer may arrive, and by when: for the wire and for the official SDKs' HTTP clients.

An answer is outside data: a server that sends gigabytes, or drips a byte a minute forever (each
wait shorter than the read timeout), would hold the rollout and its memory. Every client v1 builds
from a `ClientConfig` reads its answers within `ClientConfig.max_response_bytes` and
`ClientConfig.response_timeout`: the wire through `AnswerLimits` directly, the SDK-based clients
(Responses, Messages, and the SDK calls of the OpenAI family) through `bounded_client_class`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from v1._util.deadline import Deadline
from v1.clients._http import library_of, tls_context
from v1.errors import ModelError

if TYPE_CHECKING:
    from v1.config import ClientConfig

T = TypeVar("T")

DECODED_AWAY = frozenset({"content-encoding", "content-length"})
"""Headers that describe the body as sent: a bounded answer carries it decoded (its size counted after decoding)."""


class AnswerLimits:
    """How much of one upstream answer may arrive, and by when: `max_bytes` in all, within `seconds` of the request.

    Past either limit the call fails with one `ModelError` (not retried: the same server would do it again).
    """

    def __init__(self, url: str, max_bytes: int, seconds: float) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.seconds = seconds
        self._loop = asyncio.get_running_loop()
        self.deadline = self._loop.time() + seconds

    def too_slow(self) -> ModelError:
        return ModelError(f"the answer of {self.url} took longer than {self.seconds:g} s in all (ClientConfig.response_timeout)")

    def too_large(self) -> ModelError:
        return ModelError(f"the answer of {self.url} is larger than {self.max_bytes} bytes (ClientConfig.max_response_bytes)")

    async def within(self, awaitable: Awaitable[T]) -> T:
        """`awaitable`'s result (the answer's status and headers), unless the deadline passes first (then `ModelError`)."""
        deadline = Deadline(self._loop, self.deadline)
        try:
            with deadline:
                return await awaitable
        except TimeoutError:
            if not deadline.expired:  # the transport's own read timeout: the caller words that one
                raise
            raise self.too_slow() from None

    async def whole(self, sending: Awaitable[Any]) -> tuple[Any, bytes]:
        """The answer `sending` gives (`stream` and `aclose` are read) and its whole body, both within the limits.

        One deadline covers the wait and the read (a body that does not stream is read in one go);
        the answer is closed once read, or when a limit is passed.
        """
        deadline = Deadline(self._loop, self.deadline)
        try:
            with deadline:
                answer = await sending
                try:
                    return answer, await self._read(answer.stream)
                finally:
                    await answer.aclose()
        except TimeoutError:
            if not deadline.expired:  # the transport's own read timeout: the caller words that one
                raise
            raise self.too_slow() from None

    async def _read(self, chunks: AsyncIterable[bytes]) -> bytes:
        read_within = getattr(chunks, "read_within", None)  # a body that can be read whole within the limit
        if read_within is not None:
            whole: bytes | None = await read_within(self.max_bytes)
            if whole is not None:
                return whole
        received: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > self.max_bytes:
                raise self.too_large()
            received.append(chunk)
        return b"".join(received)

    async def bounded(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """`chunks` as they arrive, until the answer passes a limit (then `ModelError`)."""
        received = 0
        iterator = aiter(chunks)
        while True:
            deadline = Deadline(self._loop, self.deadline)
            try:
                with deadline:  # around the wait only: never across a yield
                    chunk = await anext(iterator)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if not deadline.expired:
                    raise
                raise self.too_slow() from None
            received += len(chunk)
            if received > self.max_bytes:
                raise self.too_large()
            yield chunk


_BOUNDED_CLASSES: dict[type[Any], type[Any]] = {}


def bounded_client_class(cls: type[Any]) -> type[Any]:
    """`cls`, an SDK's async HTTP client class, whose every answer is read within `AnswerLimits`.

    Built with two more keywords, `max_response_bytes` and `response_timeout`. Its `send` (the HTTP
    library's public method every SDK call goes through) waits for the status and headers within the
    deadline, then hands the SDK an answer whose body, decoded, streams through `AnswerLimits.bounded`;
    past a limit the connection is dropped at once, so the server's further bytes are never read.
    """
    if cls not in _BOUNDED_CLASSES:
        _BOUNDED_CLASSES[cls] = _bounded(cls)
    return _BOUNDED_CLASSES[cls]


def _bounded(cls: type[Any]) -> type[Any]:
    library = library_of(cls)

    class BoundedBody(library.AsyncByteStream):  # type: ignore[misc,name-defined]
        """One answer's decoded body within its limits; closing it (or passing a limit) closes the answer under it."""

        def __init__(self, answer: Any, limits: AnswerLimits) -> None:
            self._answer = answer
            self._limits = limits

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._limits.bounded(self._answer.aiter_bytes()):
                    yield chunk
            except ModelError:
                await self._answer.aclose()
                raise

        async def aclose(self) -> None:
            await self._answer.aclose()

    class BoundedClient(cls):  # type: ignore[misc,valid-type]
        def __init__(self, *, max_response_bytes: int, response_timeout: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.max_response_bytes = max_response_bytes
            self.response_timeout = response_timeout

        async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
            limits = AnswerLimits(str(request.url), self.max_response_bytes, self.response_timeout)
            answer = await limits.within(super().send(request, stream=True, **kwargs))
            headers = [(name, value) for name, value in answer.headers.multi_items() if name.lower() not in DECODED_AWAY]
            bounded = library.Response(
                answer.status_code,
                headers=headers,
                stream=BoundedBody(answer, limits),
                request=request,
                extensions=answer.extensions,
            )
            if not stream:
                try:
                    await bounded.aread()
                finally:
                    await bounded.aclose()
            return bounded

    BoundedClient.__name__ = BoundedClient.__qualname__ = f"Bounded{cls.__name__.lstrip('_')}"
    return BoundedClient


def bounded_http_client(cls: type[Any], config: ClientConfig) -> Any:
    """An SDK's async pool (`cls`) for a client built from `config`: its timeouts and connection limits,
    proxies from the environment, no redirects (a redirect would carry the key and the prompt elsewhere),
    and every answer read within its limits."""
    library = library_of(cls)
    return bounded_client_class(cls)(
        max_response_bytes=config.max_response_bytes,
        response_timeout=config.response_timeout,
        timeout=library.Timeout(config.timeout, connect=config.connect_wait),
        limits=library.Limits(max_connections=config.max_connections, max_keepalive_connections=config.max_keepalive_connections),
        trust_env=True,
        verify=tls_context(cls),
        follow_redirects=False,
    )


__all__ = ["AnswerLimits", "bounded_client_class", "bounded_http_client"]
