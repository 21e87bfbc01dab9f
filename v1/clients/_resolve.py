"""Turning whatever a harness was given as `client` into a shared `Client`."""

from __future__ import annotations

import itertools
import sys
import weakref
from collections.abc import AsyncIterator
from typing import Any

from v1._util.calling import is_async_callable
from v1._util.loop_scope import LoopScope, loop_scope
from v1._util.weak_identity import WeakIdentityMap
from v1.clients._anthropic_messages import AnthropicMessagesClient
from v1.clients._base import Client
from v1.clients._http import is_async_openai
from v1.clients._openai_chat_completions import OpenAIChatCompletionsClient
from v1.clients._sync_openai import ThreadedOpenAI
from v1.config import ClientConfig
from v1.errors import ConfigError
from v1.registry import CLIENT_TYPES, ClientPart
from v1.types import Response, ResponseDelta


def client_class(client_type: str) -> type[ClientPart]:
    """The `Client` class registered as `client_type` in `v1.registry.CLIENT_TYPES`.

    Raises:
        UnknownNameError: no client type has that name.
        PluginError: its plugin fails to import or is not a client class.
    """
    return CLIENT_TYPES.get(client_type)


class RoundRobinClient:
    """`ClientConfig.endpoint_configs`: each call goes to the next upstream in turn.

    Every endpoint gets its own client of the config's `client_type` (its own
    pool, key, headers and retries): `ClientConfig.endpoint_variants`.
    """

    def __init__(self, config: ClientConfig) -> None:
        cls = client_class(config.client_type)
        self.config = config
        self.clients = [cls(variant) for variant in config.endpoint_variants()]
        self._turn = itertools.cycle(range(len(self.clients)))

    def upstream_locations(self) -> list[str]:
        """Every upstream's URL, ``host:port`` and host (redacted from the endpoint's error bodies)."""
        return [location for client in self.clients for location in client.upstream_locations()]

    def next_client(self) -> ClientPart:
        """The client whose turn it is."""
        return self.clients[next(self._turn)]

    async def get_response(self, *args: Any, **kwargs: Any) -> Response:
        """`Client.get_response` on the next upstream."""
        return await self.next_client().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[ResponseDelta | Response]:
        """`Client.stream_response` on the next upstream."""
        async for item in self.next_client().stream_response(*args, **kwargs):
            yield item

    async def close(self) -> None:
        for client in self.clients:
            await client.close()


class _ClientsByObject:
    """The shared client each `ClientConfig` object last resolved to on one loop, with a copy of the config as it
    was then: a harness resolves its config once per rollout, and a config equal to its copy needs no JSON key."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[weakref.ref[ClientConfig], ClientConfig, Client[Any, Any, Any, Any]]] = {}

    def get(self, config: ClientConfig) -> Client[Any, Any, Any, Any] | None:
        known = self._known.get(id(config))
        if known is None or known[0]() is not config or not _unchanged(config, known[1]):
            return None  # a config changed in place since is looked up by its content again
        return known[2]

    def remember(self, config: ClientConfig, client: Client[Any, Any, Any, Any]) -> None:
        key = id(config)
        self._known[key] = (weakref.ref(config, lambda _: self._known.pop(key, None)), config.model_copy(deep=True), client)


def _unchanged(config: ClientConfig, copy: ClientConfig) -> bool:
    """Whether `config` still equals its `copy`, as pydantic's `__eq__` would say, without the generic-model
    checks around it: the same class, fields (nested dicts, lists and models compared by value), extras and
    private attributes."""
    return (
        type(config) is type(copy)
        and config.__dict__ == copy.__dict__
        and config.__pydantic_extra__ == copy.__pydantic_extra__
        and config.__pydantic_private__ == copy.__pydantic_private__
    )


_by_object: WeakIdentityMap[LoopScope, _ClientsByObject] = WeakIdentityMap()


async def shared_client(config: ClientConfig) -> Client[Any, Any, Any, Any]:
    """One `Client` per distinct `ClientConfig` on this event loop, so connections are pooled."""
    scope = await loop_scope()
    by_object = _by_object.get(scope)
    if by_object is None:
        by_object = _by_object[scope] = _ClientsByObject()
    known = by_object.get(config)
    if known is not None:
        return known
    cls = client_class(config.client_type)

    async def create() -> tuple[Client[Any, Any, Any, Any], Any]:
        client: Any = RoundRobinClient(config) if config.endpoint_configs else cls(config)
        return client, client.close

    client = await scope.get(("client", config.model_dump_json()), create)
    by_object.remember(config, client)
    return client


async def resolve_client(client: Any) -> Client[Any, Any, Any, Any]:
    """A `Client` from a `ClientConfig` (shared per config), a `Client`, or an SDK client object.

    An SDK client (`AsyncOpenAI`, or anything with an async `chat.completions.create`;
    an `AsyncAnthropic`) is wrapped once per object, so every rollout using it shares one wrapper.
    A sync `openai.OpenAI` is wrapped too: its calls run on a bounded thread pool (`ThreadedOpenAI`).
    """
    if isinstance(client, ClientConfig):  # first: the common case, and no ABC check
        return await shared_client(client)
    if isinstance(client, (Client, RoundRobinClient)):
        return client  # type: ignore[return-value]
    if isinstance(client, dict):
        return await shared_client(ClientConfig(client))
    anthropic = sys.modules.get("anthropic")  # an AsyncAnthropic passed in means anthropic is imported
    if anthropic is not None and isinstance(client, anthropic.AsyncAnthropic):
        return await _wrap_once(client, AnthropicMessagesClient)
    create = getattr(getattr(getattr(client, "chat", None), "completions", None), "create", None)
    if create is None:
        raise ConfigError(
            f"client: expected a ClientConfig, a v1 Client or an AsyncOpenAI-like object, got {type(client).__name__}"
        )
    openai = sys.modules.get("openai")  # an OpenAI passed in means openai is imported
    if openai is not None and isinstance(client, openai.OpenAI):
        return await _wrap_sync_openai(client)
    if not (is_async_callable(create) or is_async_openai(client)):
        raise ConfigError(
            f"client: {type(client).__name__}.chat.completions.create is not async; pass an AsyncOpenAI or an openai.OpenAI"
        )
    return await _wrap_once(client, OpenAIChatCompletionsClient)


async def _wrap_once(client: Any, cls: type[Client[Any, Any, Any, Any]]) -> Client[Any, Any, Any, Any]:
    scope = await loop_scope()

    async def wrap() -> tuple[Client[Any, Any, Any, Any], Any]:
        async def nothing_to_close() -> None:
            return None

        return cls(client), nothing_to_close

    return await scope.get(("wrapped", id(client)), wrap)


async def _wrap_sync_openai(client: Any) -> Client[Any, Any, Any, Any]:
    """A sync `openai.OpenAI`, once per object and loop: a chat client over its `ThreadedOpenAI` view."""
    scope = await loop_scope()

    async def wrap() -> tuple[Client[Any, Any, Any, Any], Any]:
        threaded = ThreadedOpenAI(client)

        async def stop_threads() -> None:
            threaded.close()

        return OpenAIChatCompletionsClient(threaded), stop_threads  # type: ignore[arg-type]

    return await scope.get(("wrapped", id(client)), wrap)


__all__ = ["CLIENT_TYPES", "RoundRobinClient", "client_class", "resolve_client", "shared_client"]
