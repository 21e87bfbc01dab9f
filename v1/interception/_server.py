"""The interception endpoint: one local HTTP server per process (per running event loop).

Every rollout gets a base URL ``http://127.0.0.1:PORT/r/<rollout id>/v1`` and a
secret key. A request with a wrong or missing key, or for a rollout that does
not exist (any more), gets the same 401, so the caller learns nothing about
which rollouts exist; a known route with the wrong method 405; unknown routes
404; malformed bodies 400; bodies over the limit 413; all in the error shape of
the route's dialect (also a body that would pass the in-flight budget, `BodyBudget`). The port is
bound once (port 0, read back).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from v1._util import bounded_json as _bounded_json
from v1._util.descriptors import raise_descriptor_limit
from v1._util.loop_scope import loop_scope
from v1._util.weak_identity import WeakIdentityMap
from v1.clients import InProcessTransport, http_library, redact_locations, serve_in_process, stop_serving, tls_context
from v1.errors import EndpointError, ModelError, ModelRequestError, NotSupportedError, OverlongPromptError, RolloutStopped
from v1.interception import _mcp_server as mcp_server
from v1.interception._body_budget import PROCESS_FACTOR, BodyBudget, declared_size
from v1.interception._connection_gate import (
    IDLE_TIMEOUT_S,
    ConnectionGate,
    connection_limit,
)
from v1.interception._dialect import BadRequest, EndpointRequest, EndpointStreamWriter, deltas_of
from v1.interception._dialect import dumps as _dumps
from v1.interception._exchange import Answer, BodyTimedOut, BodyTooLarge, Exchange
from v1.interception._in_process import EndpointApp
from v1.interception._lookup import DEFAULT_DIALECT, DIALECTS, dialect_for_path
from v1.interception._relay import StreamRelay
from v1.interception._routes import Found, Route, RouteTable
from v1.interception._sdk import EndpointPools
from v1.interception._session import API_ROOT, RolloutSession, StopCheck
from v1.interception._upstream import upstream
from v1.registry import DialectPart
from v1.rollout import EndpointAccess
from v1.sandbox import PIN_HEADER
from v1.types import Response, ResponseDelta

if TYPE_CHECKING:
    from aiohttp import web

    from v1.rollout import State

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_BODY_ENV = "V1_ENDPOINT_MAX_BODY_BYTES"
# aiohttp's default listen queue (128) overflows when hundreds of rollouts connect at once, and
# the kernel retries a dropped connect only after a second or more (capped by net.core.somaxconn).
LISTEN_BACKLOG = 4096
KEEPALIVE_S = 10.0
"""Seconds of upstream silence after which a streaming answer gets a keepalive event."""
UNAUTHORIZED = "invalid or missing API key for this rollout"
MAX_CALLS_IN_FLIGHT = 64
BODY_READ_TIMEOUT_S = 30.0
"""Seconds a request body may take to arrive once its head has; a slower one gets 408 and its connection is closed."""
"""Model calls one rollout may have in flight at once; more get a 429 in the dialect's shape."""
# JSON escapes of UTF-16 surrogates, or surrogates encoded as UTF-8: only then can a body hold a lone surrogate.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")


def auth_errors() -> tuple[type[Exception], ...]:
    """Upstream credential errors of the SDKs in use (each SDK's only once it was imported: they are large)."""
    errors: tuple[type[Exception], ...] = ()
    for name in ("openai", "anthropic"):
        sdk = sys.modules.get(name)
        if sdk is not None:
            errors += (sdk.AuthenticationError, sdk.PermissionDeniedError)
    return errors


@dataclass(frozen=True)
class Failure:
    """How a failure is answered: status, message, and the error's type, code and parameter."""

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None


def _auth_failure(exc: Exception) -> Failure:
    message = f"upstream rejected the credentials: {getattr(exc, 'message', exc)}"
    return Failure(getattr(exc, "status_code", 401), message, "authentication_error", "upstream_auth")


FAILURES: tuple[tuple[Callable[[], tuple[type[BaseException], ...]], Callable[[Any], Failure]], ...] = (
    (lambda: (RolloutStopped,), lambda exc: Failure(400, str(exc), code=exc.condition)),
    (lambda: (OverlongPromptError,), lambda exc: Failure(400, str(exc), code="context_length_exceeded")),
    (
        lambda: (BadRequest, NotSupportedError),
        lambda exc: Failure(400, str(exc), code="unsupported_feature", param=getattr(exc, "param", None)),
    ),
    (
        lambda: (ModelRequestError,),
        lambda exc: Failure(exc.status_code, str(exc), code="upstream_rejected_request"),
    ),
    (
        lambda: (ModelError,),
        lambda exc: Failure(502, f"upstream model call failed: {exc}", "upstream_error", "upstream_error"),
    ),
    (auth_errors, _auth_failure),
    (
        lambda: (RecursionError,),
        lambda exc: Failure(400, "the request is nested too deeply", code="invalid_request"),
    ),
)
"""Every expected failure of a call and how the program is told, first match wins; anything else is a 500."""


def describe_failure(session: RolloutSession, exc: BaseException) -> Failure:
    """The answer to a failed call, upstream locations redacted; an unexpected failure is recorded on the state."""
    for classes, failure_of in FAILURES:
        if isinstance(exc, classes()):
            failure = failure_of(exc)
            break
    else:
        logger.error("interception endpoint failed while answering rollout %s", session.rollout_id, exc_info=exc)
        session.state.record_error(exc, "endpoint")
        failure = Failure(500, f"interception endpoint error: {type(exc).__name__}: {exc}", "server_error", "endpoint_error")
    client = session.upstream.client
    locations = client.upstream_locations() if client is not None else []
    message = redact_locations(failure.message, locations)
    return failure if message == failure.message else Failure(failure.status, message, failure.type, failure.code, failure.param)


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    dialect: DialectPart = DEFAULT_DIALECT,
    headers: dict[str, str] | None = None,
) -> Answer:
    """An error in the dialect's shape (OpenAI's ``{"error": {"message", "type", "param", "code"}}`` by default)."""
    body = dialect.error_body(status, message, type_, code, param)
    return Answer(status, _dumps(body), headers)


def _failure_response(failure: Failure, dialect: DialectPart) -> Answer:
    return error_response(
        failure.status, failure.message, type_=failure.type, code=failure.code, param=failure.param, dialect=dialect
    )


def _too_many_calls(session: RolloutSession, dialect: DialectPart) -> Answer | None:
    """The 429 for a rollout at its cap of model calls in flight (`MAX_CALLS_IN_FLIGHT`), else None."""
    if session.calls_in_flight < MAX_CALLS_IN_FLIGHT:
        return None
    return error_response(
        429,
        f"this rollout has {session.calls_in_flight} model calls in flight already; retry later",
        type_="rate_limit_error",
        code="too_many_calls_in_flight",
        dialect=dialect,
        headers={"Retry-After": "1"},
    )


def _parsed(
    dialect: DialectPart, session: RolloutSession, body: Any, fields: Mapping[str, str], whole_only: bool
) -> EndpointRequest | Answer | None:
    """A model call's request as its dialect reads it (and readies the session for it), or the 400 that refuses it.

    None when `whole_only` and the request asks to stream (before the dialect's `before_call`).
    """
    try:
        parsed = dialect.parse_request(body, **fields)
        if whole_only and parsed.stream:
            return None
        dialect.before_call(session, parsed)
    except BadRequest as exc:
        return error_response(400, str(exc), param=exc.param, dialect=dialect)
    except RecursionError:
        return error_response(400, "the request is nested too deeply", code="invalid_request", dialect=dialect)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # a value of the wrong kind where the dialect expects another (an object as a role, say)
        return error_response(400, f"malformed request: {type(exc).__name__}: {exc}", dialect=dialect)
    return parsed


def _all_values(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    return [value for key, value in headers.items() if key.lower() == name.lower()]


class _AiohttpExchange:
    """A request carried by aiohttp; implements `Exchange`."""

    __slots__ = ("authorized", "close_after", "request", "response")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.close_after = False  # the connection is closed once answered (its body was never read to the end)
        self.authorized: str | None = None

    @property
    def method(self) -> str:
        return self.request.method

    @property
    def path(self) -> str:
        return self.request.path

    @property
    def headers(self) -> Mapping[str, str]:
        return self.request.headers

    @property
    def gone(self) -> bool:
        return self.request.transport is None

    async def read(self) -> bytes:
        from aiohttp import web

        try:
            async with asyncio.timeout(BODY_READ_TIMEOUT_S):
                return await self.request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise BodyTooLarge from exc
        except TimeoutError as exc:
            self.close_after = True
            raise BodyTimedOut from exc

    async def open_stream(self, headers: Mapping[str, str]) -> None:
        from aiohttp import web

        self.response = web.StreamResponse(headers=headers)
        await self.response.prepare(self.request)

    async def write(self, data: bytes) -> None:
        assert self.response is not None
        await self.response.write(data)

    async def write_eof(self) -> None:
        assert self.response is not None
        await self.response.write_eof()


def _web_response(answer: Answer) -> web.Response:
    from aiohttp import web

    return web.Response(status=answer.status, text=answer.text, content_type="application/json", headers=answer.headers)


def _over_aiohttp(
    handle: Callable[[Exchange], Awaitable[Answer | None]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler for an exchange handler: the whole answer, or the stream it wrote."""

    async def handler(request: web.Request) -> web.StreamResponse:
        exchange = _AiohttpExchange(request)
        answer = await handle(exchange)
        if answer is not None:
            response = _web_response(answer)
            if exchange.close_after:
                response.force_close()
            return response
        assert exchange.response is not None, "an exchange handler answers or streams"
        return exchange.response

    return handler


def _delta_frames(delta: ResponseDelta, writer: EndpointStreamWriter) -> list[bytes]:
    return writer.delta(delta)


def _final_frames(response: Response, writer: EndpointStreamWriter, replay: bool) -> list[bytes]:
    """The frames that end a stream; an answer that came whole (nothing relayed yet) first as its deltas."""
    frames = [frame for delta in deltas_of(response) for frame in writer.delta(delta)] if replay else []
    frames.extend(writer.finish(response))
    return frames


class EndpointServer:
    """The HTTP server shared by every rollout on this event loop (and the in-process transport's handler)."""

    def __init__(self, host: str = "127.0.0.1", max_body_bytes: int | None = None) -> None:
        self.host = host
        self.max_body_bytes = max_body_bytes or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES))
        self.body_budget = BodyBudget(self.max_body_bytes, PROCESS_FACTOR * self.max_body_bytes)
        self.sessions: dict[str, RolloutSession] = {}
        self.port: int | None = None
        self.pools: EndpointPools | None = None
        self._runner: web.AppRunner | None = None
        self._gate: ConnectionGate | None = None
        self._app: EndpointApp | None = None
        self._absent_key = os.urandom(24).hex()  # compared against when a rollout is unknown: same work, same answer
        self._call_routes = {Route(d.prefix + d.route, partial(self._handle, d)): d for d in DIALECTS.values()}
        self.routes = RouteTable(self._route_list(), self._unknown_route)
        # v1's own calls name their route under the rollout's base URL, which ends in its API root
        self._own_dialects: dict[str, DialectPart] = {}
        for dialect in DIALECTS.values():
            if dialect.prefix == API_ROOT:
                self._own_dialects.setdefault(dialect.route, dialect)  # the first, as `routes` finds it

    def _route_list(self) -> list[Route]:
        """Every path the endpoint answers, under ``/r/<rollout id>``; both carriers route through this list."""
        counters = [d for d in DIALECTS.values() if d.token_counter is not None]
        return [
            # before the dialects' routes: Gemini's ``{method}`` would match ``:countTokens``
            *(Route(d.prefix + d.token_counter.route, partial(self._count_tokens_of, d)) for d in counters),  # type: ignore[union-attr]
            *self._call_routes,
            Route("/v1/models", self._models_of),
            Route(mcp_server.ROUTE, self._mcp_of),
        ]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._gated(_over_aiohttp(self.dispatch)))  # one route table for both carriers
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=IDLE_TIMEOUT_S)
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        self._gate = ConnectionGate(server, lambda: server.connections, connection_limit(raise_descriptor_limit()))
        self.port = self._gate.listen(self.host, LISTEN_BACKLOG)
        # compressed bodies go over the socket
        fallback = http_library().AsyncHTTPTransport(trust_env=False, verify=tls_context(trust_env=False))
        self.pools = EndpointPools(self.url, InProcessTransport(fallback))
        self._app = EndpointApp(self.dispatch, self.max_body_bytes, self.answer_own_call)
        serve_in_process(self.url, self._app)
        logger.debug("interception endpoint listening on %s", self.url)

    def _gated(
        self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """`handler`, its connection marked busy for the gate until the answer is written (so it is never evicted)."""

        async def gated(request: web.Request) -> web.StreamResponse:
            if self._gate is None:
                return await handler(request)
            rollout = self._authorized_rollout(request.path, request.headers)
            if not self._gate.admits(rollout):
                message = f"this rollout has {self._gate.per_rollout} requests in progress already; retry later"
                refusal = error_response(
                    429,
                    message,
                    type_="rate_limit_error",
                    code="too_many_connections",
                    dialect=dialect_for_path(request.path),
                    headers={"Retry-After": "1"},
                )
                refused = _web_response(refusal)
                refused.force_close()  # its body is never read
                return refused
            with self._gate.serving(request.transport, rollout):
                response = await handler(request)
                if not response.prepared:
                    await response.prepare(request)
                    await response.write_eof()
                return response

        return gated

    @property
    def serving(self) -> bool:
        """Started, and not closed since."""
        return self._app is not None

    async def close(self) -> None:
        if self._gate is not None:
            self._gate.close()
            self._gate = None
        if self._app is not None:
            stop_serving(self.url, self._app)
            self._app = None
        if self.pools is not None:
            await self.pools.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sessions.clear()

    def open(self, state: State, stop_check: StopCheck | None = None) -> RolloutSession:
        """Register a rollout: the program reaches it through `state.runtime.endpoint` (URL, key, SDK pools) only."""
        if self.pools is None:
            raise EndpointError("the interception endpoint is not started: open rollouts after start()")
        handles = upstream(state)
        session = RolloutSession(state, self.url, stop_check, handles)
        self.sessions[session.rollout_id] = session
        state.runtime.endpoint = EndpointAccess(
            session.base_url, session.api_key, self.pools, own_call=InProcessTransport.own_call(self.url, session.rollout_id)
        )
        handles.session = session
        return session

    def close_session(self, state: State) -> None:
        """Forget a rollout: later requests for it get 401, like any wrong key."""
        handles = upstream(state)
        session = handles.session
        if session is not None:
            session.closed = True
            self.sessions.pop(session.rollout_id, None)
            handles.session = None
        if state.runtime.endpoint is not None:
            state.runtime.endpoint.open = False

    # -- request handling -----------------------------------------------------------------

    async def dispatch(self, exchange: Exchange) -> Answer | None:
        """Route and answer one request, carried over HTTP or in process, by `routes`; None once streamed.

        An authorized request first reserves its declared body size in `body_budget` (see `BodyBudget`),
        held until it is answered; one over the largest body or the budget gets a 413 before its body is read.
        """
        found = self.routes.find(exchange.path)
        rollout = exchange.authorized = self._key_holder(found, exchange.headers)
        if rollout is None:  # answered 401 (or 404) without reading a body
            return await self.routes.dispatch(exchange, found)
        size = declared_size(exchange.method, exchange.headers, self.max_body_bytes)
        refusal = self._body_refusal(rollout, size)
        if refusal is not None:
            exchange.close_after = True
            return error_response(413, refusal, code="request_too_large", dialect=dialect_for_path(exchange.path))
        try:
            return await self.routes.dispatch(exchange, found)
        finally:
            self.body_budget.give_back(rollout, size)

    def _body_refusal(self, rollout: str, size: int) -> str | None:
        """Why a body of `size` bytes for `rollout` is refused (413), or None with `size` taken from its budget."""
        if size > self.max_body_bytes:
            return f"request body is larger than {self.max_body_bytes} bytes (set {MAX_BODY_ENV} to raise the limit)"
        return self.body_budget.take(rollout, size)

    async def answer_own_call(self, rollout: str, route: str, api_key: str, body: bytes, read: Any = None) -> Answer | None:
        """v1's own whole-answer call (`call_model`) of `rollout` at `route` under its base URL, handed over in
        process with its key (`EndpointAccess.own_call`). None for a route that is no model call and for a
        request to stream: the caller then posts it through the carrier. `read`: the value `body` reads as,
        when the caller wrote it and read it back (a value of its own), else None: the body is read here.
        """
        dialect = self._own_dialects.get(route)
        if dialect is None:
            return None
        if not self._holds_key(self.sessions.get(rollout), api_key):
            return error_response(401, UNAUTHORIZED, type_="authentication_error", code="invalid_api_key", dialect=dialect)
        return await self._whole_call(rollout, dialect, body, read)

    async def _whole_call(self, rollout: str, dialect: DialectPart, body: bytes, read: Any = None) -> Answer | None:
        """A whole-answer model call of `rollout`, its key checked: body size and budget, bounded JSON, the
        calls in flight, the dialect's parse, then the call (None: the request asks to stream)."""
        session = self.sessions[rollout]
        refusal = self._body_refusal(rollout, len(body))
        if refusal is not None:
            return error_response(413, refusal, code="request_too_large", dialect=dialect)
        try:
            try:
                if read is None:
                    request = _bounded_json.loads(body, "request body")
                else:
                    request = _bounded_json.read_already(body, read, "request body")
            except ValueError as exc:
                return error_response(400, str(exc), code="invalid_json", dialect=dialect)
            crowded = _too_many_calls(session, dialect)
            if crowded is not None:
                return crowded
            parsed = _parsed(dialect, session, request, {}, whole_only=True)
            if not isinstance(parsed, EndpointRequest):
                return parsed
            session.calls_in_flight += 1
            try:
                return await self._answer(session, dialect, parsed, None, False, None)
            except Exception as exc:
                return _failure_response(describe_failure(session, exc), dialect)
            finally:
                session.calls_in_flight -= 1
        finally:
            self.body_budget.give_back(rollout, len(body))

    def _authorized_rollout(self, path: str, headers: Mapping[str, str]) -> str | None:
        """The rollout a request is for when it presents that rollout's key; else None."""
        return self._key_holder(self.routes.find(path), headers)

    def _key_holder(self, found: Found | None, headers: Mapping[str, str]) -> str | None:
        """The rollout of a request's route (`RouteTable.find`) when the request presents that rollout's key; else None."""
        if found is None:
            return None
        rollout = found[1]
        return rollout if self._key_matches(self.sessions.get(rollout), rollout, headers) else None

    def _key_matches(self, session: RolloutSession | None, rollout: str, headers: Mapping[str, str]) -> bool:
        presented = headers.get("x-api-key") or headers.get("x-goog-api-key")
        if presented is None:
            authorization = headers.get("authorization", "")
            if authorization[:7].lower() == "bearer ":
                presented = authorization[7:].strip()
        pinned = _all_values(headers, PIN_HEADER)  # a sandbox's relay names the only rollout its socket may reach
        return self._holds_key(session, presented) and all(value == rollout for value in pinned)

    def _holds_key(self, session: RolloutSession | None, presented: str | None) -> bool:
        """Whether `presented` is `session`'s key: compared in constant time, against a stand-in when there is none."""
        expected = session.api_key if session is not None else self._absent_key
        matches = hmac.compare_digest((presented or "").encode("utf-8", "replace"), expected.encode())
        return session is not None and bool(presented) and matches

    def _authorize(self, rollout: str, exchange: Exchange, dialect: DialectPart) -> RolloutSession | Answer:
        """The session of `rollout` when `dispatch` found the request's key to be its key; else a 401."""
        session = self.sessions.get(rollout)
        if session is None or exchange.authorized != rollout:
            return error_response(401, UNAUTHORIZED, type_="authentication_error", code="invalid_api_key", dialect=dialect)
        return session

    async def _read_json(self, exchange: Exchange, dialect: DialectPart) -> tuple[Any, bytes] | Answer:
        try:
            raw = await exchange.read()
        except BodyTimedOut:
            return error_response(
                408, f"the request body did not arrive within {BODY_READ_TIMEOUT_S:g} s", code="body_timeout", dialect=dialect
            )
        except BodyTooLarge:
            return error_response(
                413,
                f"request body is larger than {self.max_body_bytes} bytes (set {MAX_BODY_ENV} to raise the limit)",
                code="request_too_large",
                dialect=dialect,
            )
        except Exception as exc:  # a body that does not match its Content-Encoding, a broken chunked body, ...
            return error_response(
                400, f"the request body could not be read: {type(exc).__name__}", code="invalid_body", dialect=dialect
            )
        try:
            body = _bounded_json.loads(raw, "request body")
            if _SURROGATE.search(raw):
                json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeError:
            return error_response(400, "request body holds a lone UTF-16 surrogate", code="invalid_json", dialect=dialect)
        except ValueError as exc:
            return error_response(400, str(exc), code="invalid_json", dialect=dialect)
        return body, raw

    async def _admit(self, rollout: str, exchange: Exchange, dialect: DialectPart) -> tuple[RolloutSession, Any, bytes] | Answer:
        """A POST for a known rollout with the right key and a JSON body: the session and the body; else the refusal."""
        if exchange.method != "POST":
            return _method_not_allowed(exchange, dialect, "POST")
        session = self._authorize(rollout, exchange, dialect)
        if isinstance(session, Answer):
            return session
        read = await self._read_json(exchange, dialect)
        if isinstance(read, Answer):
            return read
        return session, *read

    async def _handle(self, dialect: DialectPart, rollout: str, exchange: Exchange, fields: Mapping[str, str]) -> Answer | None:
        admitted = await self._admit(rollout, exchange, dialect)
        if isinstance(admitted, Answer):
            return admitted
        session = admitted[0]
        crowded = _too_many_calls(session, dialect)
        if crowded is not None:
            return crowded
        session.calls_in_flight += 1
        try:
            return await self._call(dialect, exchange, *admitted, fields)
        finally:
            session.calls_in_flight -= 1

    async def _call(
        self,
        dialect: DialectPart,
        exchange: Exchange,
        session: RolloutSession,
        body: Any,
        raw: bytes,
        fields: Mapping[str, str],
    ) -> Answer | None:
        parsed = _parsed(dialect, session, body, fields, whole_only=False)
        if not isinstance(parsed, EndpointRequest):
            return parsed
        headers = exchange.headers
        idempotency_key = headers.get("Idempotency-Key")
        body_key = hashlib.blake2b(raw, digest_size=16).digest() + exchange.path.encode()
        if idempotency_key:  # replays only a byte-identical body: another body under the same key is a new call
            key, retry = b"idempotency:" + idempotency_key.encode("utf-8", "replace") + b"\0" + body_key, True
        else:
            key, retry = body_key, headers.get("x-stainless-retry-count", "0") not in ("0", "")
        try:
            if parsed.stream:
                await self._answer_stream(exchange, session, dialect, parsed, key, retry)
                return None
            return await self._answer(session, dialect, parsed, key, retry, lambda: exchange.gone)
        except Exception as exc:
            return _failure_response(describe_failure(session, exc), dialect)

    async def _answer(
        self,
        session: RolloutSession,
        dialect: DialectPart,
        parsed: EndpointRequest,
        key: bytes | None,
        retry: bool,
        caller_gone: Callable[[], bool] | None,
    ) -> Answer:
        response = await session.complete(
            parsed.messages,
            parsed.tools,
            parsed.sampling_args,
            dedupe_key=key,
            retry=retry,
            extras=step_extras(dialect, parsed),
            caller_gone=caller_gone,
        )
        if session.closed:  # the rollout ended while its call was upstream: answered as any request for it now is
            return error_response(401, UNAUTHORIZED, type_="authentication_error", code="invalid_api_key", dialect=dialect)
        dialect.after_call(session, parsed, response)
        return Answer(200, value=dialect.render(response, session.state.get_model(), parsed))  # written when carried

    async def _answer_stream(
        self,
        exchange: Exchange,
        session: RolloutSession,
        dialect: DialectPart,
        parsed: EndpointRequest,
        key: bytes,
        retry: bool,
    ) -> None:
        """Relay the upstream's deltas as the dialect's events as they arrive.

        Failures before the first delta are ordinary error responses (raised); later ones
        become the dialect's in-stream error event. While the upstream is silent
        for `KEEPALIVE_S`, a keepalive (SSE comment; Anthropic `ping`) keeps the
        connection alive. The step is recorded before the terminal event is written.
        An answer that arrives whole (a deduplicated retry, an upstream that does
        not stream) is replayed as deltas.
        """
        items = session.stream(
            parsed.messages, parsed.tools, parsed.sampling_args, dedupe_key=key, retry=retry, extras=step_extras(dialect, parsed)
        )
        model = session.state.get_model()
        relay = StreamRelay(exchange, lambda: dialect.stream_writer(model, parsed, None), KEEPALIVE_S)
        try:
            relayed = False
            async for item in items:
                if not isinstance(item, Response):
                    relayed = True
                    await relay.send(partial(_delta_frames, item))
                    continue
                dialect.after_call(session, parsed, item)
                await relay.send(partial(_final_frames, item, replay=not relayed))
            await exchange.write_eof()
        except ConnectionError:  # the program went away mid-stream
            logger.debug("rollout %s closed its stream early", session.rollout_id)
        except asyncio.CancelledError:
            if not relay.settle():
                raise
            logger.debug("rollout %s left its stream while the upstream was silent", session.rollout_id)
        except Exception as exc:
            writer = relay.writer
            if writer is None:
                raise
            failure = describe_failure(session, exc)
            try:
                for frame in writer.error(failure.status, failure.message, failure.type, failure.code):
                    await exchange.write(frame)
                await exchange.write_eof()
            except ConnectionError:
                pass
        finally:
            await relay.close()
            await items.aclose()

    async def _models_of(self, rollout: str, exchange: Exchange, fields: Mapping[str, str]) -> Answer:
        if exchange.method not in ("GET", "HEAD"):
            return _method_not_allowed(exchange, DEFAULT_DIALECT, "GET")
        session = self._authorize(rollout, exchange, DEFAULT_DIALECT)
        if isinstance(session, Answer):
            return session
        model = session.state.runtime.model or "unknown"
        return Answer(200, _dumps({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "v1"}]}))

    async def _count_tokens_of(self, dialect: DialectPart, rollout: str, exchange: Exchange, fields: Mapping[str, str]) -> Answer:
        """A dialect's token count of a request (`TokenCounter`): authorized and checked like a call, never sent upstream."""
        assert dialect.token_counter is not None
        admitted = await self._admit(rollout, exchange, dialect)
        if isinstance(admitted, Answer):
            return admitted
        try:
            return Answer(200, _dumps(dialect.token_counter.count(admitted[1], **fields)))
        except BadRequest as exc:
            return error_response(400, str(exc), param=exc.param, dialect=dialect)
        except (RecursionError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            return error_response(400, f"malformed request: {type(exc).__name__}", dialect=dialect)

    async def _mcp_of(self, rollout: str, exchange: Exchange, fields: Mapping[str, str]) -> Answer:
        """The rollout's tools over MCP (see `mcp_server`)."""
        admitted = await self._admit(rollout, exchange, DEFAULT_DIALECT)
        if isinstance(admitted, Answer):
            if admitted.status in (400, 413):  # an unreadable body is a JSON-RPC parse error
                return Answer(admitted.status, _dumps(mcp_server.parse_error(admitted.text or "unreadable body")))
            return admitted
        session, body, _ = admitted
        messages = body if isinstance(body, list) else [body]
        if len(messages) > mcp_server.MAX_BATCH:
            refusal = mcp_server.invalid_request(f"a batch holds at most {mcp_server.MAX_BATCH} messages, got {len(messages)}")
            return Answer(400, _dumps(refusal))
        if session.calls_in_flight + len(messages) > MAX_CALLS_IN_FLIGHT:
            refusal = mcp_server.invalid_request(
                f"this rollout has {session.calls_in_flight} calls in flight already; retry later"
            )
            return Answer(429, _dumps(refusal), {"Retry-After": "1"})
        session.calls_in_flight += len(messages)  # a batch counts as many calls as it holds
        try:
            answers = [answer for message in messages if (answer := await mcp_server.answer(session, message)) is not None]
        finally:
            session.calls_in_flight -= len(messages)
        if not answers:
            return Answer(202, "")
        return Answer(200, _dumps(answers if isinstance(body, list) else answers[0]))

    async def _unknown_route(self, exchange: Exchange) -> Answer:
        return error_response(
            404,
            f"no such route: {exchange.method} {exchange.path}",
            type_="not_found_error",
            code="unknown_route",
            dialect=dialect_for_path(exchange.path),
        )


def step_extras(dialect: DialectPart, parsed: EndpointRequest) -> dict[str, Any]:
    """What the step records of the request besides its prompt: the program's dialect, streaming, dropped parts."""
    extras: dict[str, Any] = {"dialect": dialect.name, "stream": parsed.stream}
    if parsed.warnings:
        extras["warnings"] = list(parsed.warnings)
    return extras


def _method_not_allowed(exchange: Exchange, dialect: DialectPart, allowed: str) -> Answer:
    return error_response(
        405,
        f"method {exchange.method} is not allowed on {exchange.path}; use {allowed}",
        code="method_not_allowed",
        dialect=dialect,
        headers={"Allow": allowed},
    )


_started: WeakIdentityMap[asyncio.AbstractEventLoop, EndpointServer] = WeakIdentityMap()
"""Each loop's endpoint once started, so a rollout finds it without the loop scope's coroutines; one closed since
(its loop scope closed) is passed over."""


async def get_endpoint() -> EndpointServer:
    """The endpoint server of the running event loop, started on first use."""
    loop = asyncio.get_running_loop()
    server = _started.get(loop)
    if server is not None and server.serving:
        return server
    scope = await loop_scope()

    async def create() -> tuple[EndpointServer, Callable[[], Awaitable[None]]]:
        server = EndpointServer()
        await server.start()
        return server, server.close

    server = _started[loop] = await scope.get("endpoint", create)
    return server


__all__ = ["FAILURES", "EndpointServer", "Failure", "describe_failure", "error_response", "get_endpoint"]
