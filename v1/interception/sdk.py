"""Official SDK clients pointed at a rollout's endpoint, sharing one connection pool."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from openai import AsyncOpenAI, OpenAI

ENDPOINT_TIMEOUT = httpx.Timeout(3600.0, connect=10.0)
ENDPOINT_LIMITS = httpx.Limits(max_connections=4096, max_keepalive_connections=1024)


class _SharedAsyncClient(httpx.AsyncClient):
    """An httpx client that SDK clients may "close" without closing the shared pool."""

    async def aclose(self) -> None:
        return None

    async def really_close(self) -> None:
        await super().aclose()


class _SharedSyncClient(httpx.Client):
    def close(self) -> None:
        return None


_sync_http: _SharedSyncClient | None = None
_sync_lock = threading.Lock()


async def shared_async_http() -> _SharedAsyncClient:
    from v1.loop_scope import loop_scope

    scope = await loop_scope()

    async def create() -> tuple[_SharedAsyncClient, Any]:
        http = _SharedAsyncClient(timeout=ENDPOINT_TIMEOUT, limits=ENDPOINT_LIMITS, trust_env=False)
        return http, http.really_close

    return await scope.get("endpoint-sdk-http", create)


def _shared_sync_http() -> _SharedSyncClient:
    global _sync_http
    with _sync_lock:
        if _sync_http is None:
            _sync_http = _SharedSyncClient(timeout=ENDPOINT_TIMEOUT, limits=ENDPOINT_LIMITS, trust_env=False)
        return _sync_http


def openai_client(base_url: str, api_key: str, *, sync: bool = False, http_client: Any = None) -> AsyncOpenAI | OpenAI:
    """An `AsyncOpenAI` (or `OpenAI`) for a rollout's endpoint.

    `max_retries=0`: the endpoint's upstream client already retries, and an SDK
    retry of a call the endpoint answered would record a second step.
    """
    if sync:
        return OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client or _shared_sync_http())
    return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client)


__all__ = ["openai_client", "shared_async_http"]
