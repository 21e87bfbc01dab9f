"""The interception endpoint: one local HTTP server per process (per running event loop).

Every rollout gets a base URL ``http://127.0.0.1:PORT/r/<rollout id>/v1`` and a
secret key. Requests with another rollout's key, or none, get 401; unknown
rollouts 404; malformed bodies 400; bodies over the limit 413; all with
OpenAI-shaped error bodies. The port is bound once (port 0, read back).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import openai
from aiohttp import web

from v1.errors import ModelError, OverlongPromptError, RolloutStopped
from v1.interception import chat_completions
from v1.interception.sdk import shared_async_http
from v1.interception.session import RolloutSession, StopCheck
from v1.loop_scope import loop_scope

if TYPE_CHECKING:
    from v1.state import State

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_BODY_ENV = "V1_ENDPOINT_MAX_BODY_BYTES"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def error_response(
    status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> web.Response:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.Response(status=status, text=_dumps(body), content_type="application/json")


class EndpointServer:
    """The HTTP server shared by every rollout on this event loop."""

    def __init__(self, host: str = "127.0.0.1", max_body_bytes: int | None = None) -> None:
        self.host = host
        self.max_body_bytes = max_body_bytes or int(os.environ.get(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES))
        self.sessions: dict[str, RolloutSession] = {}
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._http_client: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/r/{rollout}/v1/chat/completions", self._chat_completions)
        app.router.add_get("/r/{rollout}/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._unknown_route)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._http_client = await shared_async_http()
        logger.debug("interception endpoint listening on %s", self.url)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.sessions.clear()

    def open(self, state: State, stop_check: StopCheck | None = None) -> RolloutSession:
        """Register a rollout; its URL and key are on the returned session (and `state.runtime.session`)."""
        session = RolloutSession(state, self.url, self._http_client, stop_check)
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

    def _authorize(self, request: web.Request) -> RolloutSession | web.Response:
        session = self.sessions.get(request.match_info["rollout"])
        if session is None:
            return error_response(
                404,
                "unknown rollout: it never existed or has already been cleaned up",
                type_="not_found_error",
                code="unknown_rollout",
            )
        presented = request.headers.get("x-api-key")
        authorization = request.headers.get("Authorization", "")
        if presented is None and authorization[:7].lower() == "bearer ":
            presented = authorization[7:].strip()
        if not presented or not hmac.compare_digest(presented.encode(), session.api_key.encode()):
            return error_response(
                401, "invalid or missing API key for this rollout", type_="authentication_error", code="invalid_api_key"
            )
        return session

    async def _read_json(self, request: web.Request) -> Any:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"request body is larger than {self.max_body_bytes} bytes (set {MAX_BODY_ENV} to raise the limit)",
                code="request_too_large",
            )
        try:
            return json.loads(raw)
        except ValueError as exc:
            return error_response(400, f"request body is not valid JSON: {exc}", code="invalid_json")

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        session = self._authorize(request)
        if isinstance(session, web.Response):
            return session
        body = await self._read_json(request)
        if isinstance(body, web.Response):
            return body
        try:
            parsed = chat_completions.parse_request(body)
        except chat_completions.BadRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        return await self._guarded(
            session,
            lambda: self._answer_chat(request, session, parsed),
        )

    async def _answer_chat(
        self, request: web.Request, session: RolloutSession, parsed: chat_completions.ChatRequest
    ) -> web.StreamResponse:
        response = await session.complete(parsed.messages, parsed.tools, parsed.sampling_args)
        model = session.state.get_model()
        if not parsed.stream:
            return web.Response(text=_dumps(chat_completions.render_completion(response, model)), content_type="application/json")
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await stream.prepare(request)
        try:
            for chunk in chat_completions.render_chunks(response, model, parsed.include_usage):
                await stream.write(f"data: {_dumps(chunk)}\n\n".encode())
            await stream.write(b"data: [DONE]\n\n")
            await stream.write_eof()
        except ConnectionError:  # the program went away mid-stream; the step is already recorded
            logger.debug("rollout %s closed its stream early", session.rollout_id)
        return stream

    async def _guarded(self, session: RolloutSession, answer: Callable[[], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Turn every failure into an OpenAI-shaped error; the session has recorded it on the state."""
        try:
            return await answer()
        except RolloutStopped as exc:
            return error_response(400, str(exc), code=exc.condition)
        except OverlongPromptError as exc:
            return error_response(400, str(exc), code="context_length_exceeded")
        except ModelError as exc:
            return error_response(502, f"upstream model call failed: {exc}", type_="upstream_error", code="upstream_error")
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            return error_response(
                exc.status_code,
                f"upstream rejected the credentials: {exc.message}",
                type_="authentication_error",
                code="upstream_auth",
            )
        except Exception as exc:
            logger.exception("interception endpoint failed while answering rollout %s", session.rollout_id)
            session.state._record_error(exc, "endpoint")
            return error_response(
                500, f"interception endpoint error: {type(exc).__name__}: {exc}", type_="server_error", code="endpoint_error"
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
            404, f"no such route: {request.method} {request.path}", type_="not_found_error", code="unknown_route"
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
