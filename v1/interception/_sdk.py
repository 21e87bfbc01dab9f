"""Official SDK clients pointed at a rollout's endpoint, sharing one connection pool."""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

from v1._util.loopback import LOOPBACK_CONNECT_S
from v1.clients import anthropic_async_client_class, async_client_class, http_library, sync_http_client, tls_context

if TYPE_CHECKING:
    import anthropic
    from openai import AsyncOpenAI, OpenAI

POOL: dict[str, Any] = {
    "timeout": 3600.0,
    "connect_timeout": LOOPBACK_CONNECT_S,
    "max_connections": 4096,
    "max_keepalive_connections": 1024,
}


def _shared(cls: type[Any], close_name: str) -> type[Any]:
    """A subclass whose `close`/`aclose` is a no-op, so an SDK client "closing" it keeps the shared pool."""

    async def aclose(self: Any) -> None:
        return None

    def close(self: Any) -> None:
        return None

    async def really_close(self: Any) -> None:
        await cls.aclose(self)

    members = {"aclose": aclose, "really_close": really_close} if close_name == "aclose" else {"close": close}
    return type(f"Shared{cls.__name__.lstrip('_')}", (cls,), members)


@functools.cache
def _shared_async_client() -> type[Any]:
    return _shared(async_client_class(), "aclose")


_sync_http: Any = None
_sync_lock = threading.Lock()


def _pool_limits() -> Any:
    return http_library().Limits(
        max_connections=POOL["max_connections"], max_keepalive_connections=POOL["max_keepalive_connections"]
    )


def in_process_http(origin: str, transport: Any) -> Any:
    """A pool for `AsyncOpenAI` clients whose requests for `origin` go through `transport` (the in-process one).

    The transport is mounted on `origin` (the HTTP library's public `mounts=`); other origins use the
    pool's own transport. An SDK client closing it is a no-op: the endpoint closes it (`really_close`).
    """
    return _shared_async_client()(
        mounts={origin: transport},
        timeout=http_library().Timeout(POOL["timeout"], connect=POOL["connect_timeout"]),
        limits=_pool_limits(),
        trust_env=False,
        verify=tls_context(trust_env=False),
        follow_redirects=False,
    )


def _shared_sync_http() -> Any:
    global _sync_http
    with _sync_lock:
        if _sync_http is None:
            import openai

            _sync_http = sync_http_client(**POOL, cls=_shared(openai.DefaultHttpxClient, "close"))
        return _sync_http


def openai_client(base_url: str, api_key: str, *, sync: bool = False, http_client: Any = None) -> AsyncOpenAI | OpenAI:
    """An `AsyncOpenAI` (or `OpenAI`) for a rollout's endpoint.

    `max_retries=0`: the endpoint's upstream client already retries, and an SDK
    retry of a call the endpoint answered would record a second step.
    """
    from openai import AsyncOpenAI, OpenAI

    if sync:
        return OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client or _shared_sync_http())
    return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client)


_anthropic_sync_http: Any = None


def _anthropic_pool_options() -> dict[str, Any]:
    return {
        "timeout": http_library().Timeout(POOL["timeout"], connect=POOL["connect_timeout"]),
        "limits": _pool_limits(),
        "verify": tls_context(anthropic_async_client_class(), trust_env=False),
        "follow_redirects": False,
    }


def anthropic_async_http(mounts: dict[str, Any] | None = None) -> Any:
    """A pool for `AsyncAnthropic` clients talking to the endpoint (the SDK's own class; closing it is a no-op).

    Args:
        mounts: transports by origin (the in-process one on the endpoint's origin), when the pool serves in-process programs.
    """
    return _shared(anthropic_async_client_class(), "aclose")(**_anthropic_pool_options(), trust_env=False, mounts=mounts)


def _anthropic_shared_sync_http() -> Any:
    global _anthropic_sync_http
    with _sync_lock:
        if _anthropic_sync_http is None:
            import anthropic

            _anthropic_sync_http = _shared(anthropic.DefaultHttpxClient, "close")(**_anthropic_pool_options())
        return _anthropic_sync_http


def anthropic_client(
    base_url: str, api_key: str, *, sync: bool = False, http_client: Any = None
) -> anthropic.AsyncAnthropic | anthropic.Anthropic:
    """An `AsyncAnthropic` (or `Anthropic`) for a rollout's endpoint; `base_url` without ``/v1``.

    `max_retries=0` for the same reason as `openai_client`. The key goes in `x-api-key`.
    """
    import anthropic

    if sync:
        return anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, http_client=_anthropic_shared_sync_http())
    return anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client)


class EndpointPools:
    """The connection pools SDK clients use to reach the endpoint: the OpenAI one, and the Anthropic one on first use.

    Async clients go through the in-process transport (no socket; the same handler as over HTTP);
    sync clients, used from worker threads, go over HTTP. Lent to programs (through
    `state.get_client`), so it holds pools only: nothing that leads to the server.
    """

    def __init__(self, origin: str, transport: Any) -> None:
        self.transport = transport
        """The in-process carrier to the endpoint (its fallback: the network), for requests v1 builds itself."""
        self.openai = in_process_http(origin, transport)
        self._mounts = {origin: transport}
        self._anthropic: Any = None

    def anthropic(self) -> Any:
        """The pool for `AsyncAnthropic` clients, created on first use (anthropic is large to import)."""
        if self._anthropic is None:
            self._anthropic = anthropic_async_http(self._mounts)
        return self._anthropic

    def sdk_client(self, api: str, base_url: str, api_key: str, *, sync: bool = False) -> Any:
        """An official SDK client for a rollout's endpoint on these pools: Anthropic's for `"messages"`, else OpenAI's.

        Args:
            api: the dialect the program speaks (`"messages"` or an OpenAI one).
            base_url: the rollout's endpoint URL, ending in ``/v1``.
            api_key: the rollout's own key.
            sync: a blocking client (on a shared process-wide pool), for programs in a worker thread.
        """
        if api == "messages":
            return anthropic_client(
                base_url.removesuffix("/v1"), api_key, sync=sync, http_client=None if sync else self.anthropic()
            )
        return openai_client(base_url, api_key, sync=sync, http_client=None if sync else self.openai)

    async def close(self) -> None:
        """Close both pools and the transports they hold."""
        await self.openai.really_close()
        if self._anthropic is not None:
            await self._anthropic.really_close()
            self._anthropic = None


__all__ = ["EndpointPools", "anthropic_async_http", "anthropic_client", "in_process_http", "openai_client"]
