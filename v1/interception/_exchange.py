"""One request to the endpoint as its handler sees it, whatever carried it.

The endpoint's handler (`EndpointServer.dispatch`) reads a request through an
`Exchange` and answers with an `Answer` (a whole JSON body) or by streaming
through the exchange. Two carriers implement it: aiohttp for programs that reach
the endpoint over HTTP (commands, sandboxes, any HTTP client), and the
in-process transport (`v1.interception`) behind the SDK clients that
`state.get_client()` returns, so both go through the same handler, recording and errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from v1._util.json_check import compact_json_text


class BodyTooLarge(Exception):
    """The request body is over the endpoint's limit."""


class BodyTimedOut(Exception):
    """The request body did not arrive in time."""


class Answer:
    """A whole answer: status, JSON text, extra headers (the content type is always JSON).

    A model call's answer is made from its JSON `value`, written as text only when a carrier asks
    for `text`: v1's own calls in process take the value itself (`EndpointApp.post`). The value is
    built for this answer alone (nothing in it is shared with the recorded step), so its reader may keep it.
    """

    __slots__ = ("_text", "headers", "status", "value")

    def __init__(self, status: int, text: str | None = None, headers: Mapping[str, str] | None = None, *, value: Any = None):
        self.status = status
        self._text = text
        self.headers = headers
        self.value = value

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = compact_json_text(self.value)
        return self._text

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.text[:80]!r})"


class Exchange(Protocol):
    """The request side (method, path, headers, body) and the streaming side of one call.

    `close_after`: set by the handler when it answers without reading the body, so the carrier closes
    the connection after the answer instead of reading what is left of the body. `authorized`: the
    rollout whose key the request presented, as the handler found it on arrival (None: none), so the
    key is compared once a request.
    """

    close_after: bool
    authorized: str | None

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Case-insensitive request headers."""
        ...

    @property
    def gone(self) -> bool:
        """True once the program stopped waiting for the answer (closed its connection)."""
        ...

    async def read(self) -> bytes:
        """The whole body. Raises: BodyTooLarge over the limit; any other exception when it cannot be read."""
        ...

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        """Start a 200 streaming answer with these headers."""
        ...

    async def write(self, data: bytes) -> None:
        """Send one chunk of the stream. Raises: ConnectionError once the program went away."""
        ...

    async def write_eof(self) -> None:
        """End the stream."""
        ...


JSON_CONTENT_TYPE = "application/json; charset=utf-8"

__all__ = ["JSON_CONTENT_TYPE", "Answer", "BodyTimedOut", "BodyTooLarge", "Exchange"]
