"""The interception endpoint: one local HTTP server per process (per running event loop).

Every rollout gets a base URL ``http://127.0.0.1:PORT/r/<rollout id>/v1`` and a
secret key. Requests with another rollout's key, or none, get 401; unknown
rollouts 404; malformed bodies 400; bodies over the limit 413; all with
OpenAI-shaped error bodies. The port is bound once (port 0, read back).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import openai
from aiohttp import web

from v1.errors import ModelError, NotSupportedError, OverlongPromptError, RolloutStopped
from v1.interception import chat_completions, completions, messages, responses
from v1.interception.dialect import BadRequest, EndpointRequest, check_tool_results, deltas_of
from v1.interception.sdk import anthropic_async_http, shared_async_http
from v1.interception.session import RolloutSession, StopCheck
from v1.loop_scope import loop_scope
from v1.types import Response

if TYPE_CHECKING:
    from v1.state import State

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_BODY_ENV = "V1_ENDPOINT_MAX_BODY_BYTES"
# aiohttp's default listen queue (128) overflows when hundreds of rollouts connect at once, and
# the kernel retries a dropped connect only after a second or more (capped by net.core.somaxconn).
LISTEN_BACKLOG = 4096
KEEPALIVE_S = 10.0
"""Seconds of upstream silence after which a streaming answer gets a keepalive event."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


DIALECTS: tuple[ModuleType, ...] = (chat_completions, completions, responses, messages)
OPENAI_AUTH_ERRORS = (openai.AuthenticationError, openai.PermissionDeniedError)


def auth_errors() -> tuple[type[Exception], ...]:
    """Upstream credential errors of the SDKs in use (anthropic's only once it was imported: it costs ~40 MiB)."""
    anthropic = sys.modules.get("anthropic")
    if anthropic is None:
        return OPENAI_AUTH_ERRORS
    return (*OPENAI_AUTH_ERRORS, anthropic.AuthenticationError, anthropic.PermissionDeniedError)


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    dialect: ModuleType = chat_completions,
) -> web.Response:
    """An error in the dialect's shape (OpenAI's ``{"error": {"message", "type", "param", "code"}}`` by default)."""
    body = dialect.error_body(status, message, type_, code, param)
    return web.Response(status=status, text=_dumps(body), content_type="application/json")


def _dialect_of(request: web.Request) -> ModuleType:
    return messages if request.path.endswith("/v1/messages") else chat_completions


class EndpointServer:
    """The HTTP server shared by every rollout on this event loop."""

    def __init__(self, host: str = "127.0.0.1", max_body_bytes: int | None = None) -> None:
        self.host = host
        self.max_body_bytes = max_body_bytes or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES))
        self.sessions: dict[str, RolloutSession] = {}
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._http_client: Any = None
        self._anthropic_http_client: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body_bytes)
        for dialect in DIALECTS:
            app.router.add_post(f"/r/{{rollout}}/v1{dialect.ROUTE}", self._handler(dialect))
        app.router.add_get("/r/{rollout}/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._unknown_route)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, backlog=LISTEN_BACKLOG)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._http_client = await shared_async_http()
        logger.debug("interception endpoint listening on %s", self.url)

    def anthropic_http_client(self) -> Any:
        """The pool for `AsyncAnthropic` clients of this server's rollouts, created on first use."""
        if self._anthropic_http_client is None:
            self._anthropic_http_client = anthropic_async_http()
        return self._anthropic_http_client

    async def close(self) -> None:
        if self._anthropic_http_client is not None:
            await self._anthropic_http_client.really_close()
            self._anthropic_http_client = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sessions.clear()

    def open(self, state: State, stop_check: StopCheck | None = None) -> RolloutSession:
        """Register a rollout; its URL and key are on the returned session (and `state.runtime.session`)."""
        session = RolloutSession(state, self.url, self._http_client, stop_check)
        session.server = self
        self.sessions[session.rollout_id] = session
        state.runtime.session = session
        return session

    def close_session(self, state: State) -> None:
        """Forget a rollout: later requests for it get 404."""
        session = state.runtime.session
        if session is not None:
            session.closed = True
            self.sessions.pop(session.rollout_id, None)

    # -- request handling -----------------------------------------------------------------

    def _authorize(self, request: web.Request, dialect: ModuleType = chat_completions) -> RolloutSession | web.Response:
        session = self.sessions.get(request.match_info["rollout"])
        if session is None:
            return error_response(
                404,
                "unknown rollout: it never existed or has already been cleaned up",
                type_="not_found_error",
                code="unknown_rollout",
                dialect=dialect,
            )
        presented = request.headers.get("x-api-key")
        authorization = request.headers.get("Authorization", "")
        if presented is None and authorization[:7].lower() == "bearer ":
            presented = authorization[7:].strip()
        if not presented or not hmac.compare_digest(presented.encode(), session.api_key.encode()):
            return error_response(
                401,
                "invalid or missing API key for this rollout",
                type_="authentication_error",
                code="invalid_api_key",
                dialect=dialect,
            )
        return session

    async def _read_json(self, request: web.Request, dialect: ModuleType = chat_completions) -> tuple[Any, bytes]:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"request body is larger than {self.max_body_bytes} bytes (set {MAX_BODY_ENV} to raise the limit)",
                code="request_too_large",
                dialect=dialect,
            ), b""
        try:
            return json.loads(raw), raw
        except ValueError as exc:
            return error_response(400, f"request body is not valid JSON: {exc}", code="invalid_json", dialect=dialect), raw

    def _handler(self, dialect: ModuleType) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            session = self._authorize(request, dialect)
            if isinstance(session, web.Response):
                return session
            body, raw = await self._read_json(request, dialect)
            if isinstance(body, web.Response):
                return body
            try:
                parsed = dialect.parse_request(body)
                if dialect is responses:
                    self._resolve_previous_response(session, parsed)
            except BadRequest as exc:
                return error_response(400, str(exc), param=exc.param, dialect=dialect)
            idempotency_key = request.headers.get("Idempotency-Key")
            if idempotency_key:
                key, retry = b"idempotency:" + idempotency_key.encode(), True
            else:
                key = hashlib.blake2b(raw, digest_size=16).digest() + dialect.ROUTE.encode()
                retry = request.headers.get("x-stainless-retry-count", "0") not in ("0", "")
            return await self._guarded(session, lambda: self._answer(request, session, dialect, parsed, key, retry), dialect)

        return handle

    @staticmethod
    def _resolve_previous_response(session: RolloutSession, parsed: EndpointRequest) -> None:
        previous = parsed.extra.get("previous_response_id")
        if previous is not None:
            history = session.response_history.get(previous)
            if history is None:
                raise BadRequest(f"previous_response_id {previous!r} is not a response of this rollout", "previous_response_id")
            assert isinstance(parsed.messages, list)
            parsed.messages = [*history, *parsed.messages]
        assert isinstance(parsed.messages, list)
        if not parsed.messages:
            raise BadRequest("'input' is empty: there is nothing to answer", "input")
        check_tool_results(parsed.messages, "input")

    async def _answer(
        self,
        request: web.Request,
        session: RolloutSession,
        dialect: ModuleType,
        parsed: EndpointRequest,
        key: bytes,
        retry: bool,
    ) -> web.StreamResponse:
        if parsed.stream:
            return await self._answer_stream(request, session, dialect, parsed, key, retry)
        response = await session.complete(parsed.messages, parsed.tools, parsed.sampling_args, dedupe_key=key, retry=retry)
        if dialect is responses:
            parsed.extra["response_id"] = self._remember_response(session, parsed, response)
        body = dialect.render(response, session.state.get_model(), parsed)
        return web.Response(text=_dumps(body), content_type="application/json")

    @staticmethod
    def _remember_response(
        session: RolloutSession, parsed: EndpointRequest, response: Response, response_id: str | None = None
    ) -> str:
        """The Responses id of `response` (the same for a deduplicated retry); its conversation kept for `previous_response_id`."""
        known = session.response_ids.get(id(response))
        if known is not None:
            return known[1]
        response_id = response_id or f"resp_{secrets.token_hex(12)}"
        session.response_ids[id(response)] = (response, response_id)
        assert isinstance(parsed.messages, list)
        session.response_history[response_id] = [*parsed.messages, response.message.to_chat_message()]
        return response_id

    async def _answer_stream(
        self,
        request: web.Request,
        session: RolloutSession,
        dialect: ModuleType,
        parsed: EndpointRequest,
        key: bytes,
        retry: bool,
    ) -> web.StreamResponse:
        """Relay the upstream's deltas as the dialect's events as they arrive.

        Failures before the first delta are ordinary error responses; later ones
        become the dialect's in-stream error event. While the upstream is silent
        for `KEEPALIVE_S`, a keepalive (SSE comment; Anthropic `ping`) keeps the
        connection alive. The step is recorded before the terminal event is written.
        """
        items = session.stream(parsed.messages, parsed.tools, parsed.sampling_args, dedupe_key=key, retry=retry)
        stream: web.StreamResponse | None = None
        writer: Any = None
        model = session.state.get_model()
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                pending = asyncio.ensure_future(items.__anext__())
                while not (await asyncio.wait({pending}, timeout=KEEPALIVE_S))[0]:
                    if stream is None:
                        stream, writer = await self._open_stream(request, session, dialect, parsed, model, None)
                    await stream.write(writer.keepalive)
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    break
                finally:
                    pending = None
                if stream is None:
                    stream, writer = await self._open_stream(request, session, dialect, parsed, model, item)
                if isinstance(item, Response):
                    if dialect is responses:
                        self._remember_response(session, parsed, item, writer.id)
                    deltas = [] if writer.streamed else list(deltas_of(item))
                    for delta in deltas:
                        for frame in writer.delta(delta):
                            await stream.write(frame)
                    for frame in writer.finish(item):
                        await stream.write(frame)
                else:
                    writer.streamed = True
                    for frame in writer.delta(item):
                        await stream.write(frame)
            assert stream is not None, "a session stream always ends with its Response"
            await stream.write_eof()
        except ConnectionError:  # the program went away mid-stream
            logger.debug("rollout %s closed its stream early", session.rollout_id)
        except Exception as exc:
            if stream is None:
                raise
            status, message, type_, code = self._describe_failure(session, exc)
            try:
                for frame in writer.error(status, message, type_, code):
                    await stream.write(frame)
                await stream.write_eof()
            except ConnectionError:
                pass
        finally:
            if pending is not None:  # the program left (or we failed) while waiting for the upstream
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
            await items.aclose()
        assert stream is not None
        return stream

    async def _open_stream(
        self,
        request: web.Request,
        session: RolloutSession,
        dialect: ModuleType,
        parsed: EndpointRequest,
        model: str,
        first: Any,
    ) -> tuple[web.StreamResponse, Any]:
        response_id = None
        if isinstance(first, Response):
            known = session.response_ids.get(id(first))
            response_id = known[1] if known is not None else None
        writer = dialect.StreamWriter(model, parsed, response_id)
        writer.streamed = False
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await stream.prepare(request)
        for frame in writer.start():
            await stream.write(frame)
        return stream, writer

    @staticmethod
    def _describe_failure(session: RolloutSession, exc: BaseException) -> tuple[int, str, str, str | None]:
        """Status, message, type and code for a failure (the same mapping as `_guarded`)."""
        if isinstance(exc, RolloutStopped):
            return 400, str(exc), "invalid_request_error", exc.condition
        if isinstance(exc, OverlongPromptError):
            return 400, str(exc), "invalid_request_error", "context_length_exceeded"
        if isinstance(exc, (BadRequest, NotSupportedError)):
            return 400, str(exc), "invalid_request_error", "unsupported_feature"
        if isinstance(exc, ModelError):
            return 502, f"upstream model call failed: {exc}", "upstream_error", "upstream_error"
        if isinstance(exc, auth_errors()):
            status = getattr(exc, "status_code", 401)
            return (
                status,
                f"upstream rejected the credentials: {getattr(exc, 'message', exc)}",
                "authentication_error",
                "upstream_auth",
            )
        logger.error("interception endpoint failed while streaming rollout %s", session.rollout_id, exc_info=exc)
        session.state._record_error(exc, "endpoint")
        return 500, f"interception endpoint error: {type(exc).__name__}: {exc}", "server_error", "endpoint_error"

    async def _guarded(
        self, session: RolloutSession, answer: Callable[[], Awaitable[web.StreamResponse]], dialect: ModuleType = chat_completions
    ) -> web.StreamResponse:
        """Turn every failure into an error in the dialect's shape; the session has recorded it on the state."""
        try:
            return await answer()
        except RolloutStopped as exc:
            return error_response(400, str(exc), code=exc.condition, dialect=dialect)
        except OverlongPromptError as exc:
            return error_response(400, str(exc), code="context_length_exceeded", dialect=dialect)
        except (BadRequest, NotSupportedError) as exc:
            return error_response(400, str(exc), code="unsupported_feature", param=getattr(exc, "param", None), dialect=dialect)
        except ModelError as exc:
            return error_response(
                502, f"upstream model call failed: {exc}", type_="upstream_error", code="upstream_error", dialect=dialect
            )
        except auth_errors() as exc:
            return error_response(
                getattr(exc, "status_code", 401),
                f"upstream rejected the credentials: {getattr(exc, 'message', exc)}",
                type_="authentication_error",
                code="upstream_auth",
                dialect=dialect,
            )
        except Exception as exc:
            logger.exception("interception endpoint failed while answering rollout %s", session.rollout_id)
            session.state._record_error(exc, "endpoint")
            return error_response(
                500,
                f"interception endpoint error: {type(exc).__name__}: {exc}",
                type_="server_error",
                code="endpoint_error",
                dialect=dialect,
            )

    async def _models(self, request: web.Request) -> web.Response:
        session = self._authorize(request)
        if isinstance(session, web.Response):
            return session
        model = session.state.runtime.model or "unknown"
        return web.Response(
            text=_dumps({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "v1"}]}),
            content_type="application/json",
        )

    async def _unknown_route(self, request: web.Request) -> web.Response:
        return error_response(
            404,
            f"no such route: {request.method} {request.path}",
            type_="not_found_error",
            code="unknown_route",
            dialect=_dialect_of(request),
        )


async def get_endpoint() -> EndpointServer:
    """The endpoint server of the running event loop, started on first use."""
    scope = await loop_scope()

    async def create() -> tuple[EndpointServer, Callable[[], Awaitable[None]]]:
        server = EndpointServer()
        await server.start()
        return server, server.close

    return await scope.get("endpoint", create)


__all__ = ["EndpointServer", "error_response", "get_endpoint"]
