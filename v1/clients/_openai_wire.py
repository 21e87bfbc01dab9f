"""The OpenAI wire: JSON posted to an OpenAI-compatible upstream over one aiohttp pool, answers read as JSON.

The upstream clients v1 builds from a `ClientConfig` send their requests through an
`OpenAIWire` instead of the official SDK's request machinery: the request is JSON
already (v1 builds it from canonical messages) and the answer is translated from JSON,
so the SDK's request building and response parsing would be pure cost (about 40% of a
rollout's CPU before the wire; the profile in benchmarks/README.md shows them gone). What reaches the upstream is
what the SDK would send: its default headers (read from the SDK client's public
`default_headers`), the bearer key, the configured timeouts and connection limit,
proxies from the environment, no redirects. Failures are raised as the SDK's own
public exception classes (`status_error`, `APIConnectionError`, `APITimeoutError`,
`APIError` for an error event in a stream), so retry decisions and the errors that
are recorded do not depend on which path carried the call. Every request goes through the one
in-process carrier (`v1.clients.InProcessTransport`): a server of this process that
serves the upstream's origin on this loop (the built-in inference server) answers it without a
socket, and everything else goes over the aiohttp pool; the wire reads HTTP either way. Answers
are parsed with the bounded reader (`v1._util.bounded_json`, depth only: logprobs may be ``-Infinity``):
an upstream's body is outside data.

aiohttp and openai are imported on first use: `import v1` stays light.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult, urlsplit

from v1._util import bounded_json as _bounded_json
from v1._util.json_check import compact_json
from v1.clients._answer_limits import AnswerLimits
from v1.clients._http import http_library
from v1.clients._in_process import InProcessTransport, post_request, served_in_process
from v1.clients._plain_http import ACCEPT_ENCODING, PlainHTTPPool, header_lines
from v1.errors import InvalidModelResponseError, ModelError

if TYPE_CHECKING:
    import aiohttp
    import openai


def encode_json(body: Any) -> bytes:
    """A request body as compact UTF-8 JSON (NaN and infinities refused, as JSON has none)."""
    return compact_json(body, allow_nan=False)


def status_error(status: int, headers: Mapping[str, str], content: bytes, url: str) -> openai.APIStatusError:
    """The openai SDK's exception for a non-2xx answer, worded and classed as the SDK words and classes it.

    The message is ``Error code: N`` plus the body's `error.message` when it has one; `body`
    is the decoded `error` object (or the whole body, or its text when it is not JSON).
    """
    import openai

    response = http_library().Response(status, headers=dict(headers), content=content, request=_request(url))
    text = content.decode("utf-8", "replace").strip()
    message = f"Error code: {status}"
    body: Any = text or None
    try:
        body = _bounded_json.loads(text, "the error body", finite=False)
    except ValueError:
        pass
    detail = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(detail, dict) and isinstance(detail.get("message"), str) and detail["message"]:
        message += f" - {detail['message']}"
    error_class = STATUS_ERRORS.get(status)
    if error_class is None:
        error_class = "InternalServerError" if status >= 500 else "APIStatusError"
    return getattr(openai, error_class)(message, response=response, body=detail)  # type: ignore[no-any-return]


STATUS_ERRORS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
"""HTTP status -> the openai SDK's public exception class for it (others: `InternalServerError` for 5xx, else `APIStatusError`)."""


def _request(url: str) -> Any:
    httpx = http_library()
    return httpx.Request("POST", url)


def transport_error(error: BaseException, url: str) -> openai.APIError:
    """A timeout or connection failure as the SDK's `APITimeoutError` / `APIConnectionError` (raise it `from` the cause)."""
    import openai

    if isinstance(error, TimeoutError | http_library().TimeoutException):
        return openai.APITimeoutError(request=_request(url))
    return openai.APIConnectionError(message=f"Connection error: {type(error).__name__}: {error}", request=_request(url))


class OpenAIWire:
    """One upstream's base URL, headers and aiohttp pool; `post` for whole answers, `stream` for SSE ones.

    The pool is made on first use, on the running loop (a `Client` belongs to one loop).
    """

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        max_connections: int,
        max_response_bytes: int = 64 * 2**20,
        response_timeout: float = 3600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.max_response_bytes = max_response_bytes
        self.response_timeout = response_timeout
        self._session: aiohttp.ClientSession | None = None
        self._headers: Any = None
        self.transport = InProcessTransport(AiohttpTransport(self))
        """What carries every request: a server of this process serving the upstream, else the aiohttp pool."""
        self._plain: PlainHTTPPool | Literal[False] | None = None
        """The plain pool once made; False where whole answers go through aiohttp; None until the first post decides."""
        self._plain_heads: dict[str, bytes] = {}

    def plain_pool(self) -> PlainHTTPPool | None:
        """The keep-alive pool whole answers of a plain-HTTP upstream reached directly go through (made on first
        use, on the running loop, as the aiohttp session is); None where they go through aiohttp (TLS, a proxy,
        `PLAIN_HTTP_ENV` at 0)."""
        if self._plain is None:
            address = plain_address(self.base_url)  # the proxy lookup's imports only when a pool is made
            if address is None:
                self._plain = False
                return None
            host, port = address
            self._plain = PlainHTTPPool(
                host,
                port,
                max_connections=self.max_connections,
                connect_timeout=self.connect_timeout,
                read_timeout=self.timeout,
            )
        return self._plain or None

    def _plain_request(self, path: str, headers: Mapping[str, str] | None, data: bytes) -> bytes:
        """The request for the plain pool: request line and headers (the session's, each request's replacing
        those of the same name), then the body."""
        head = self._plain_heads.get(path) if not headers else None
        if head is None:
            merged = {name.lower(): (name, value) for name, value in self.headers.items()}
            merged.update({name.lower(): (name, value) for name, value in (headers or {}).items()})
            url = urlsplit(self.url(path))
            target = (url.path or "/") + (f"?{url.query}" if url.query else "")
            lines = header_lines(dict(merged.values()))
            head = b"POST %s HTTP/1.1\r\nHost: %s\r\n%s%s" % (target.encode(), _host_header(url), lines, ACCEPT_ENCODING)
            if not headers:
                self._plain_heads[path] = head
        return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(data), data)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout, sock_read=self.timeout),
                headers=self.headers,  # every request's: copied by aiohttp as they are, not parsed again per request
                # proxies from the environment, as the SDK's default client; aiohttp looks them up in a
                # thread on every request, so only when the environment names one for this URL
                trust_env=proxied(self.base_url),
            )
        return self._session

    def url(self, path: str) -> str:
        return self.base_url + path if path.startswith("/") else f"{self.base_url}/{path}"

    async def post(self, path: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
        """POST `body` as JSON; the decoded answer. Raises the SDK's exceptions (see the module doc), and
        `ModelError` for an answer past `max_response_bytes` or `response_timeout`."""
        url = self.url(path)
        limits = AnswerLimits(url, self.max_response_bytes, self.response_timeout)
        if headers:  # a request's own headers may come from a row (`extra_headers_from_state`): refused, never smuggled
            _checked_headers(headers, url)
        pool = self.plain_pool()
        try:
            if pool is not None and served_in_process(url) is None:
                status, answer_headers, content = await pool.post(self._plain_request(path, headers, encode_json(body)), limits)
            else:
                answer, content = await limits.whole(self._send(url, body, headers))
                status, answer_headers = answer.status_code, answer.headers
        except _transport_errors() as exc:
            raise transport_error(exc, url) from exc
        if not 200 <= status < 300:
            raise status_error(status, answer_headers, content, url)
        try:
            return _bounded_json.loads(content, f"the answer of {url}", finite=False)
        except _bounded_json.UnsafeJSONError as exc:
            raise InvalidModelResponseError(str(exc)) from None

    async def stream(self, path: str, body: Any, headers: Mapping[str, str] | None = None) -> SSEStream:
        """POST `body` as JSON and open its server-sent events (each event's `data` as JSON)."""
        url = self.url(path)
        limits = AnswerLimits(url, self.max_response_bytes, self.response_timeout)
        if headers:
            _checked_headers(headers, url)
        try:
            answer = await limits.within(self._send(url, body, headers))
            if not 200 <= answer.status_code < 300:
                try:
                    content = b"".join([chunk async for chunk in limits.bounded(answer.stream)])
                finally:
                    await answer.aclose()
                raise status_error(answer.status_code, answer.headers, content, url)
        except _transport_errors() as exc:
            raise transport_error(exc, url) from exc
        return SSEStream(answer, url, limits)

    async def _send(self, url: str, body: Any, headers: Mapping[str, str] | None) -> Any:
        """POST `body` to `url`; the answer (`status_code`, `headers`, `stream`, `aclose`), its body not read yet.

        A server of this process that serves `url`'s origin gets it through the in-process carrier; any
        other upstream straight over the aiohttp pool (what the carrier's fallback would do, without
        building the HTTP library's request and response around it).
        """
        data = encode_json(body)
        if served_in_process(url) is None:
            # a request's own headers replace the session's of the same name, as the SDK merges its default headers
            answer = await self.session().request("POST", url, data=data, headers=headers or None, allow_redirects=False)
            return AiohttpAnswer(answer)
        merged = {**self.headers, **headers} if headers else self._parsed_headers()
        return await self.transport.handle_async_request(post_request(url, merged, data))

    def _parsed_headers(self) -> Any:
        """`headers` as the HTTP library's `Headers`, parsed once (each request copies them)."""
        if self._headers is None:
            self._headers = http_library().Headers(self.headers)
        return self._headers

    async def close(self) -> None:
        if self._plain:
            self._plain.close()
        self._plain = None
        if self._session is not None:
            await self._session.close()
            self._session = None


@functools.cache
def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a transport raises when a request fails on the way: aiohttp's and the HTTP library's errors, timeouts."""
    import aiohttp

    return aiohttp.ClientError, http_library().TransportError, OSError  # OSError: TimeoutError and the plain pool's


class AiohttpTransport:
    """The network under an `OpenAIWire`: requests of the HTTP library sent over the wire's aiohttp pool, no redirects.

    An `AsyncBaseTransport` of the HTTP library by its methods; the answer's body streams from the
    connection (`aiohttp` errors and timeouts are raised as they are: the wire words them as the SDK does).
    """

    def __init__(self, wire: OpenAIWire) -> None:
        self._wire = wire

    async def handle_async_request(self, request: Any) -> Any:
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw]
        answer = await self._wire.session().request(
            request.method, str(request.url), data=await request.aread(), headers=headers, allow_redirects=False
        )
        return http_library().Response(answer.status, headers=list(answer.raw_headers), stream=_body_class()(answer))

    async def aclose(self) -> None:
        await self._wire.close()


class AiohttpAnswer:
    """An aiohttp answer as the wire reads one: `status_code`, `headers`, its body as `stream`, `aclose`."""

    __slots__ = ("_answer", "headers", "status_code", "stream")

    def __init__(self, answer: aiohttp.ClientResponse) -> None:
        self._answer = answer
        self.status_code = answer.status
        self.headers = answer.headers
        self.stream = _body_class()(answer)

    async def aclose(self) -> None:
        await self.stream.aclose()


@functools.cache
def _body_class() -> type[Any]:
    """The stream class of aiohttp answers: an `AsyncByteStream` of the HTTP library, built on first use."""

    class AiohttpBody(http_library().AsyncByteStream):  # type: ignore[misc,name-defined]
        """One aiohttp answer's body, chunk by chunk; closing gives the connection back when it was read to its end."""

        def __init__(self, answer: aiohttp.ClientResponse) -> None:
            self._answer = answer

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._answer.content.iter_any():
                yield chunk

        async def read_within(self, max_bytes: int) -> bytes | None:
            """The whole body in one read when it declares a length within `max_bytes` and no encoding;
            else None (read it chunk by chunk, counting: a compressed body's size is known only decoded)."""
            answer = self._answer
            declared = answer.content_length
            if declared is None or declared > max_bytes or "Content-Encoding" in answer.headers:
                return None
            return await answer.read()  # aiohttp reads the declared length, never more

        async def aclose(self) -> None:
            if self._answer.content.at_eof():
                self._answer.release()
            else:
                self._answer.close()

    return AiohttpBody


class SSEStream:
    """The `data` of each server-sent event of one answer, as JSON, until ``[DONE]`` or the end of the body.

    An event whose data carries an `error` raises the SDK's `APIError` (as the SDK's own
    stream does); data that is not JSON is an unusable answer (`InvalidModelResponseError`).
    The body is read within `limits` (`ModelError` past them).
    """

    def __init__(self, answer: Any, url: str, limits: AnswerLimits) -> None:
        self.answer = answer
        """The `Response` of the HTTP library, its body not read yet."""
        self.url = url
        self.limits = limits

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._events()

    async def _events(self) -> AsyncIterator[Any]:
        parser = SSEParser()
        try:
            async for chunk in self.limits.bounded(self.answer.stream):
                for _event, data in parser.feed(chunk):
                    if data.startswith("[DONE]"):
                        return
                    yield self._decode(data)
            for _event, data in parser.end():
                if data.startswith("[DONE]"):
                    return
                yield self._decode(data)
        except _transport_errors() as exc:
            raise transport_error(exc, self.url) from exc

    def _decode(self, data: str) -> Any:
        import openai

        try:
            decoded = _bounded_json.loads(data, "a streamed event's data", finite=False)
        except _bounded_json.UnsafeJSONError as exc:
            raise InvalidModelResponseError(f"{exc}: {data[:200]!r}") from None
        if isinstance(decoded, dict) and decoded.get("error"):
            error = decoded["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise openai.APIError(
                message if isinstance(message, str) and message else "An error occurred during streaming",
                request=_request(self.url),
                body=error,
            )
        return decoded

    async def close(self) -> None:
        """Give the connection back to the pool when the body was read to its end, else drop it."""
        await self.answer.aclose()


class SSEParser:
    """Server-sent events from a body fed chunk by chunk: ``(event, data)`` for each, multi-line data joined by newlines.

    Linear in the body: each byte is scanned for a line end once, and a line split over many
    chunks is joined once when it ends (adding each chunk to a growing buffer and splitting it
    again made one 64 MiB line cost minutes).
    """

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        """The line being received, in the pieces it came in."""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """The events that `chunk` completes."""
        events: list[tuple[str, str]] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self._pieces.append(chunk[start:end])
            line, self._pieces = b"".join(self._pieces), []
            self._line(line, events)
            start = end + 1
        if start < len(chunk):
            self._pieces.append(chunk[start:])
        return events

    def end(self) -> list[tuple[str, str]]:
        """The events the end of the body completes (a last line without its line end, an event without its blank line)."""
        events: list[tuple[str, str]] = []
        line, self._pieces = b"".join(self._pieces), []
        if line.strip():
            self._line(line, events)
        if self._data:
            events.append((self._event, "\n".join(self._data)))
            self._event, self._data = "", []
        return events

    def _line(self, raw: bytes, events: list[tuple[str, str]]) -> None:
        line = raw.rstrip(b"\r").decode("utf-8", "replace")
        if not line:
            if self._data:
                events.append((self._event, "\n".join(self._data)))
            self._event, self._data = "", []
        elif line.startswith("data:"):
            self._data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif line.startswith("event:"):
            self._event = line[6:].strip()


def proxied(url: str) -> bool:
    """Whether the environment's proxy settings (`HTTPS_PROXY`, `NO_PROXY`, ...) send requests for `url` through a proxy."""
    import urllib.request  # 0.1 s of imports: only when a pool is made

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if parts.scheme not in proxies and "all" not in proxies:
        return False
    return not urllib.request.proxy_bypass(parts.netloc)


def _checked_headers(headers: Mapping[str, str], url: str) -> None:
    """Refuse a request whose headers would break its framing (a line break or NUL, a name that is no token)."""
    try:
        header_lines(dict(headers))
    except ValueError as exc:
        raise ModelError(f"the request to {url} was not sent: {exc}") from None


PLAIN_HTTP_ENV = "V1_PLAIN_HTTP"
"""Set to ``0`` to send whole answers of plain-HTTP upstreams through aiohttp too, as streams and TLS go."""


def plain_address(url: str) -> tuple[str, int] | None:
    """The host and port the plain pool connects to for the upstream at `url`: an ``http://`` URL reached without
    a proxy and without credentials in it, unless `PLAIN_HTTP_ENV` is ``0``; else None."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.username is not None or os.environ.get(PLAIN_HTTP_ENV) == "0":
        return None
    if proxied(url):
        return None
    return parts.hostname, parts.port or 80


def _host_header(url: SplitResult) -> bytes:
    """The `Host` header's value for `url`: its host (IDNA, an IPv6 address in brackets), and its port unless 80."""
    host = url.hostname or ""
    text = f"[{host}]" if ":" in host else host.encode("idna").decode()
    return (text if url.port in (None, 80) else f"{text}:{url.port}").encode()


def sdk_headers(client: Any, api_key: str) -> dict[str, str]:
    """The headers the openai SDK client `client` sends with every request (its public `default_headers`) plus the bearer key."""
    headers = {name: value for name, value in client.default_headers.items() if isinstance(value, str)}
    headers["Authorization"] = f"Bearer {api_key}"
    for header, attribute in (("OpenAI-Organization", "organization"), ("OpenAI-Project", "project")):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            headers[header] = value
    return headers


__all__ = [
    "PLAIN_HTTP_ENV",
    "STATUS_ERRORS",
    "AiohttpTransport",
    "AnswerLimits",
    "OpenAIWire",
    "SSEParser",
    "SSEStream",
    "encode_json",
    "plain_address",
    "proxied",
    "sdk_headers",
    "status_error",
    "transport_error",
]
