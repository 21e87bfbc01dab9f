"""Connection pools for the official openai SDK, built from the HTTP stack the installed SDK speaks.

openai >= 3 is built on `httpx2` and ships an aiohttp transport; older SDKs use
`httpx` (and aiohttp only with the `httpx_aiohttp` extra). v1 builds its pools
with the SDK's own classes so the objects always match the SDK, and prefers the
aiohttp transport where the SDK has one: on loopback at hundreds of concurrent
rollouts it halved the per-call overhead of the pure-Python pool (measured in the
history of benchmarks/README.md). It honours proxies from the environment, TLS
verification and connection limits like the default client does.

Everything here imports the SDK on first use, not on import: `import v1` stays light.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import ssl
import sys
from types import ModuleType
from typing import Any


@functools.cache
def http_library() -> ModuleType:
    """`httpx2` or `httpx`: the library whose `Timeout`, `Limits`, `Response` and errors the installed SDK uses."""
    import openai

    for base in openai.DefaultAsyncHttpxClient.__mro__[1:]:
        root = base.__module__.split(".")[0]
        if root in ("httpx", "httpx2"):
            return importlib.import_module(root)
    return importlib.import_module("httpx")


def library_of(cls: type[Any]) -> ModuleType:
    """The HTTP library (`httpx2` or `httpx`) that an SDK's client class `cls` is built on."""
    for base in cls.__mro__:
        root = base.__module__.split(".")[0]
        if root in ("httpx", "httpx2"):
            return importlib.import_module(root)
    raise TypeError(f"{cls.__name__} is not an httpx client class")


def tls_context(library: ModuleType | type[Any] | None = None, *, trust_env: bool = True) -> ssl.SSLContext:
    """The TLS context the HTTP `library` would build for a new pool, built once per process.

    `library`: `httpx2` or `httpx`, or a client class built on one (default: the SDK's library).

    Building one loads the certificate bundle (~80 ms); v1 builds many pools (one per upstream client,
    per endpoint, per SDK), each of which would build its own. With `trust_env`, `SSL_CERT_FILE` and
    `SSL_CERT_DIR` are read when a pool is built (without them, a pool that trusts the environment
    and one that does not get the same context).
    """
    certificates = tuple(os.environ.get(name) for name in _CERTIFICATE_VARIABLES) if trust_env else (None, None)
    if isinstance(library, type):
        library = library_of(library)
    return _tls_context((library or http_library()).__name__, certificates)


_CERTIFICATE_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")


@functools.cache
def _tls_context(library: str, certificates: tuple[str | None, ...]) -> ssl.SSLContext:
    trust_env = any(certificates)  # the library reads the variables itself, as they are now
    return importlib.import_module(library).create_ssl_context(trust_env=trust_env)  # type: ignore[no-any-return]


def is_async_openai(client: Any) -> bool:
    """Whether `client` is an `AsyncOpenAI` (without importing the SDK: no client exists before it is imported)."""
    openai = sys.modules.get("openai")
    return openai is not None and isinstance(client, openai.AsyncOpenAI)


def _buildable(candidate: Any) -> bool:
    """Whether an SDK's `DefaultAioHttpClient` can be built: without its aiohttp transport the SDK's class raises
    `RuntimeError` when built. Building one opens nothing (its aiohttp session starts on the first request)."""
    if not isinstance(candidate, type):
        return False
    try:
        candidate(verify=tls_context(candidate))
    except RuntimeError:
        return False
    return True


@functools.cache
def _aiohttp_client_class() -> type[Any] | None:
    import openai

    candidate = getattr(openai, "DefaultAioHttpClient", None)
    return candidate if _buildable(candidate) else None


def async_client_class() -> type[Any]:
    """The SDK's aiohttp-based async client where available, else its default async client."""
    import openai

    return _aiohttp_client_class() or openai.DefaultAsyncHttpxClient


def sdk_timeout(config: Any) -> Any:
    """A `ClientConfig`'s `timeout` (read, write, pool) and connect wait (`ClientConfig.connect_wait`) as the SDK's `Timeout`."""
    return http_library().Timeout(config.timeout, connect=config.connect_wait)


def async_http_client(
    *,
    timeout: float,
    connect_timeout: float,
    max_connections: int,
    max_keepalive_connections: int,
    trust_env: bool = True,
    cls: type[Any] | None = None,
) -> Any:
    """An async pool for `AsyncOpenAI(http_client=...)`."""
    return (cls or async_client_class())(
        timeout=http_library().Timeout(timeout, connect=connect_timeout),
        limits=http_library().Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive_connections),
        trust_env=trust_env,
        verify=tls_context(trust_env=trust_env),
        follow_redirects=False,
    )


def sync_http_client(
    *, timeout: float, connect_timeout: float, max_connections: int, max_keepalive_connections: int, cls: type[Any] | None = None
) -> Any:
    """A sync pool for `OpenAI(http_client=...)`."""
    import openai

    return (cls or openai.DefaultHttpxClient)(
        timeout=http_library().Timeout(timeout, connect=connect_timeout),
        limits=http_library().Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive_connections),
        trust_env=False,
        verify=tls_context(trust_env=False),
        follow_redirects=False,
    )


def anthropic_async_client_class() -> type[Any]:
    """The anthropic SDK's aiohttp-based async client where its transport is available, else its default one.

    Imports anthropic (large): call it only when a Messages client is being built.
    """
    return _anthropic_async_client_class()


@functools.cache
def _anthropic_async_client_class() -> type[Any]:
    import anthropic

    if _buildable(anthropic.DefaultAioHttpClient):
        return anthropic.DefaultAioHttpClient  # type: ignore[no-any-return]
    return anthropic.DefaultAsyncHttpxClient  # type: ignore[no-any-return]


__all__ = [
    "anthropic_async_client_class",
    "async_client_class",
    "async_http_client",
    "http_library",
    "is_async_openai",
    "sdk_timeout",
    "sync_http_client",
    "tls_context",
]
