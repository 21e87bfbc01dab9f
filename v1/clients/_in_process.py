"""The in-process carrier: one HTTP transport that hands requests for a server of this process to it, without a socket.

A server of this process (the interception endpoint, the built-in inference server) serves its
origin in process when it starts (`serve_in_process`) with an *app*: an object with the transport
method ``handle_async_request(request)`` of the SDK's HTTP library (`v1.clients.http_library`)
that answers a `Response`, or None to decline (the request then goes over the network). Every
v1 client sends through an `InProcessTransport`, as httpx clients send to an ASGI app through
`ASGITransport`: a request for an origin served on the running loop goes to its app; any other
request, one with a compressed body and one its app declines go to the transport's `fallback`
(the network). Callers see HTTP either way (a status, headers, a body or a stream), so no caller
has a second path for servers of this process. The registry holds apps by origin, so a transport
holds no server.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol
from urllib.parse import SplitResult, urlsplit

from v1.clients._http import http_library


class InProcessApp(Protocol):
    """A server's in-process entry: a request of the SDK's HTTP library in, its `Response` (or None: declined) out.

    An app may also offer ``own_call(rollout, route, api_key, body, read)`` (`InProcessTransport.own_call`;
    ``read``: the value the body reads as, a value of its own, or None: not read),
    answering as ``post`` does, and ``post(path, headers, body)``, answering ``(status, headers, body)`` or
    ``(status, headers, body, value)`` (or None: declined; header names in lower case) for a POST read
    whole: `InProcessTransport.post` then hands it the bytes as they are. ``value``, when not None, is
    the answer's JSON value, built for this answer alone, given instead of its text (the body is empty).
    """

    async def handle_async_request(self, request: Any) -> Any | None: ...


class WholeAnswer(NamedTuple):
    """An answer read to its end: status, headers (their `get` finds a name given in lower case), body.

    `value`: the body's JSON value when an app of this process gave it instead of the body (then empty).
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    value: Any = None


class _Served(NamedTuple):
    app: InProcessApp
    loop: asyncio.AbstractEventLoop


Origin = tuple[str, str, int | None]
_SERVED: dict[Origin, _Served] = {}


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(parts: SplitResult) -> Origin:
    """``(scheme, host, port)`` as the HTTP library's `URL` spells them (a scheme's default port as None)."""
    port = None if parts.port == _DEFAULT_PORTS.get(parts.scheme) else parts.port
    return parts.scheme, parts.hostname or "", port


@functools.lru_cache(maxsize=1024)
def _origin_of(url: str) -> Origin:
    return _origin(urlsplit(url))


_NOT_PLAIN = frozenset("?#%\t\r\n")
"""Characters after which `_origin_and_path` leaves a URL to `urlsplit` (a query, a fragment, an escape, what it strips)."""


def _origin_and_path(url: str) -> tuple[Origin, str] | None:
    """The origin and path of a plain URL (``scheme://host:port/path``), the origin parsed once per address; else None.

    Every rollout's URL is a new path under one address: splitting at the path's first slash keeps
    `urlsplit` to the address, which repeats. A URL with a query, a fragment or an escape gives None.
    """
    if not _NOT_PLAIN.isdisjoint(url):
        return None
    authority = url.find("://")
    path = url.find("/", authority + 3) if authority > 0 else -1
    if path < 0:
        return None
    return _origin_of(url[:path]), url[path:]


def serve_in_process(url: str, app: InProcessApp) -> None:
    """Serve requests for `url`'s origin made on the running loop with `app` (a server, when it starts)."""
    _SERVED[_origin_of(url)] = _Served(app, asyncio.get_running_loop())


def stop_serving(url: str, app: InProcessApp) -> None:
    """Send requests for `url`'s origin over the network again (a server, when it closes; only if `app` still serves it)."""
    origin = _origin_of(url)
    served = _SERVED.get(origin)
    if served is not None and served.app is app:
        del _SERVED[origin]


def _app_for(scheme: str, host: str, port: int | None) -> InProcessApp | None:
    served = _SERVED.get((scheme, host, port))
    if served is None or served.loop is not asyncio.get_running_loop():
        return None
    return served.app


def served_in_process(url: str) -> InProcessApp | None:
    """The app serving `url`'s origin to the running loop, else None (called from a coroutine)."""
    return _app_for(*_origin_of(url))


class InProcessCall:
    """v1's own whole-answer calls of one rollout, handed to the app serving its origin on the running loop.

    Holds the origin and the rollout id only (no app or server: whoever holds it reaches nothing else).
    Calling it with a route under the rollout's base URL, the rollout's key and a JSON body gives the
    app's ``own_call(rollout, route, api_key, body, read)`` answer, or None where no app of this loop serves the
    origin or offers ``own_call`` (the caller then posts the request through the carrier).
    """

    __slots__ = ("origin", "rollout")

    def __init__(self, url: str, rollout: str) -> None:
        self.origin = _origin_of(url)
        self.rollout = rollout

    async def __call__(self, route: str, api_key: str, body: bytes, read: Any = None) -> WholeAnswer | None:
        own_call = getattr(_app_for(*self.origin), "own_call", None)
        if own_call is None:
            return None
        answer: tuple[Any, ...] | None = await own_call(self.rollout, route, api_key, body, read)
        return WholeAnswer(*answer) if answer is not None else None


class InProcessTransport:
    """Carries requests for an origin served in process to its app; every other request to `fallback`.

    An `AsyncBaseTransport` of the SDK's HTTP library by its methods (the library is imported only
    when used). Closing it closes `fallback`.
    """

    def __init__(self, fallback: Any) -> None:
        self._fallback = fallback

    @staticmethod
    def own_call(url: str, rollout: str) -> InProcessCall:
        """v1's own whole-answer calls of `rollout`, whose base URL is under `url`: handed to the app serving
        that origin on the running loop, without a request built or a URL read (see `InProcessCall`)."""
        return InProcessCall(url, rollout)

    async def handle_async_request(self, request: Any) -> Any:
        url = request.url
        app = _app_for(url.scheme, url.host, url.port)
        if app is not None and "content-encoding" not in request.headers:
            response = await app.handle_async_request(request)
            if response is not None:
                return response
        return await self._fallback.handle_async_request(request)

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> WholeAnswer:
        """POST `body` to `url` and read the whole answer: v1's own callers' whole-answer calls.

        An app serving `url`'s origin that offers ``post`` gets the path, headers and bytes as they
        are (no request or response object is built around them); any other request goes through
        `handle_async_request`, as every request of the SDKs does.
        """
        split = _origin_and_path(url)
        app = _app_for(*split[0]) if split is not None else None
        post = getattr(app, "post", None)
        if post is not None and split is not None and not any(name.lower() == "content-encoding" for name in headers):
            answer: tuple[Any, ...] | None = await post(split[1], headers, body)
            if answer is not None:
                return WholeAnswer(*answer)
        response = await self.handle_async_request(post_request(url, headers, body))
        return WholeAnswer(response.status_code, response.headers, await read_body(response))

    async def aclose(self) -> None:
        await self._fallback.aclose()

    async def __aenter__(self) -> InProcessTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@functools.lru_cache(maxsize=4096)
def _parsed_url(url: str) -> Any:
    return http_library().URL(url)


def post_request(url: str, headers: Mapping[str, str], body: bytes) -> Any:
    """A POST of `body` to `url` as the HTTP library's `Request`, built cheaply for v1's own callers.

    The URL is parsed once per address (parsing is most of a request's cost) and the body is a
    ready stream: the library adds no headers of its own, so a caller whose request may leave
    through a transport that frames by header passes its `Content-Length` (aiohttp sets its own).
    `headers` may be the library's `Headers`, which is copied without being parsed again.
    """
    httpx = http_library()
    return httpx.Request("POST", _parsed_url(url), headers=headers, stream=httpx.ByteStream(body))


def whole_response(status: int, headers: Mapping[str, str], body: bytes) -> Any:
    """A whole answer as the HTTP library's `Response` (its body a ready stream: the library reads nothing twice)."""
    httpx = http_library()
    return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))


async def read_body(response: Any) -> bytes:
    """A `Response`'s body as it arrived (not decoded again: aiohttp decompresses already), then the response closed."""
    try:
        return b"".join([chunk async for chunk in response.stream])
    finally:
        await response.aclose()


__all__ = [
    "InProcessApp",
    "InProcessTransport",
    "post_request",
    "read_body",
    "serve_in_process",
    "served_in_process",
    "stop_serving",
    "whole_response",
]
