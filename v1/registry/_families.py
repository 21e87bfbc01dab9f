"""The families of parts by name, one Protocol each: what the registry checks a part against, and what a lookup returns.

The Protocols say what the framework calls on a part (the full types live with each family: `v1.clients.Client`,
`v1.interception.Dialect`, `v1.sandbox.SandboxBackend`, `v1.Harness`, `v1.Taskset`); a part is checked
against its family's Protocol when first looked up, so a wrong plugin fails with one line naming it. The built-in
parts of every family are v1's own entry points (``pyproject.toml``): this package names no module above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from v1.registry._registry import Registry, class_with, factory_of, object_with


class ClientPart(Protocol):
    """A client type: a class built from a `ClientConfig` whose instances answer a request, whole or streamed,
    name the upstreams they reach and close (`v1.clients.Client`)."""

    def __init__(self, config: Any) -> None: ...

    def get_response(self, *args: Any, **kwargs: Any) -> Any: ...

    def stream_response(self, *args: Any, **kwargs: Any) -> Any: ...

    def upstream_locations(self) -> list[str]: ...

    def close(self) -> Any: ...


class DialectPart(Protocol):
    """A wire format the endpoint serves: its name and route, and the parts the endpoint calls to parse, answer and
    fail a request in it (`v1.interception.Dialect`, whose attributes say what each one takes)."""

    @property
    def name(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def route(self) -> str: ...

    @property
    def path_pattern(self) -> Any: ...

    @property
    def parse_request(self) -> Callable[..., Any]: ...

    @property
    def render(self) -> Callable[..., Any]: ...

    @property
    def render_stream(self) -> Callable[..., Any]: ...

    @property
    def stream_writer(self) -> Callable[..., Any]: ...

    @property
    def error_body(self) -> Callable[..., Any]: ...

    @property
    def before_call(self) -> Callable[..., Any]: ...

    @property
    def after_call(self) -> Callable[..., Any]: ...

    @property
    def token_counter(self) -> Any: ...


class SandboxBackendPart(Protocol):
    """A sandbox backend, built by its class or factory (`v1.sandbox.SandboxBackend`)."""

    def available(self) -> Any: ...

    def create(self, *args: Any, **kwargs: Any) -> Any: ...

    def delete(self, *args: Any, **kwargs: Any) -> Any: ...


class HarnessLoader(Protocol):
    """``[env.harness] loader = NAME``: a `Harness` class or a function returning one, called with the table's fields."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class TasksetLoader(Protocol):
    """``[env.taskset] loader = NAME`` and ``v1 eval NAME``: a `Taskset` class or a function returning one."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


CLIENT_TYPES: Registry[type[ClientPart]] = Registry("client type", "v1.clients", class_with(ClientPart))
"""`ClientConfig.client_type`: a `ClientPart` class by name; the built-ins are v1's entry points in the group
``v1.clients`` (``pyproject.toml``)."""

DIALECTS: Registry[DialectPart] = Registry("dialect", "v1.dialects", object_with(DialectPart))
"""The endpoint's wire formats: a `DialectPart` by name; the built-ins are v1's entry points in the group
``v1.dialects``."""

SANDBOX_BACKENDS: Registry[Callable[[], SandboxBackendPart]] = Registry(
    "sandbox backend", "v1.sandbox_backends", factory_of(SandboxBackendPart)
)
"""`SandboxConfig.backend`: a `SandboxBackendPart` class or factory by name; the built-ins are v1's entry points in
the group ``v1.sandbox_backends``."""

HARNESSES: Registry[HarnessLoader] = Registry("harness", "v1.harnesses", factory_of(HarnessLoader))
"""``[env.harness] loader = "NAME"``: a `HarnessLoader` by name; the bundled ones are v1's entry points in
the group ``v1.harnesses``."""

TASKSETS: Registry[TasksetLoader] = Registry("taskset", "v1.tasksets", factory_of(TasksetLoader))
"""``[env.taskset] loader = "NAME"`` and ``v1 eval NAME``: a `TasksetLoader` by name; the bundled ones are v1's
entry points in the group ``v1.tasksets``."""

__all__ = [
    "CLIENT_TYPES",
    "DIALECTS",
    "HARNESSES",
    "SANDBOX_BACKENDS",
    "TASKSETS",
    "ClientPart",
    "DialectPart",
    "HarnessLoader",
    "SandboxBackendPart",
    "TasksetLoader",
]
