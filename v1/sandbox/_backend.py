"""The sandbox backend protocol and the registry of backends by name.

A backend creates sandboxes, a sandbox runs commands (output streamed as it
comes), takes files in and gives them back, and is deleted by its backend.
Backends are found by name in `v1.registry.SANDBOX_BACKENDS`: the built-ins,
those registered in code (`register_backend`), and plugins declared as entry
points in the ``v1.sandbox_backends`` group, so docker, modal or daytona
backends plug in without touching the core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from v1.config import SandboxConfig
from v1.errors import PluginError
from v1.registry import SANDBOX_BACKENDS

OutputCallback = Callable[[str, bytes], None]
"""Called with ("stdout" | "stderr", bytes) as a command writes."""


PIN_HEADER = "X-V1-Rollout"
"""Set by a sandbox's relay on each request from a rollout's own socket; the endpoint refuses it for another rollout."""


@dataclass(frozen=True)
class EndpointTarget:
    """A TCP address on the host that a sandbox must reach (the interception endpoint)."""

    host: str
    port: int


@dataclass
class ExecResult:
    """How one command in a sandbox ended.

    Args:
        exit_code: the exit status; 128+N for a process killed by signal N; None if it never ran.
        stdout, stderr: the output, keeping only the last `max_output_bytes` of each.
        timed_out: the command ran past its timeout and its process tree was killed.
        limit: the resource limit the command hit ("memory", "disk", "pids"), if any.
        duration: seconds from start to end.
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    limit: str | None = None
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.limit is None


@dataclass(frozen=True)
class SandboxRecord:
    """A sandbox the ledger knows about (for `v1 sandbox list` / `reap`)."""

    backend: str
    sandbox_id: str
    owner_pid: int
    created: float
    labels: tuple[str, ...] = ()
    owner_alive: bool = True


class Workspace(Protocol):
    """Where commands run and files go: a sandbox, or a directory on the host for unsandboxed programs."""

    workdir: str

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
        network: bool | None = None,
    ) -> ExecResult:
        """Run `command` (argv) to completion; kill its whole process tree at `timeout`."""
        ...

    async def upload(self, source: Path, destination: str) -> None:
        """Copy a local file or directory to `destination` (absolute, or relative to `workdir`)."""
        ...

    async def write_file(self, destination: str, content: bytes) -> None:
        """Write `content` to a file inside the workspace."""
        ...

    async def read_file(self, path: str, max_bytes: int) -> bytes:
        """A file's bytes; `FileNotFoundError` if absent; `SandboxError` if over `max_bytes`."""
        ...


@runtime_checkable
class Sandbox(Workspace, Protocol):
    """One live sandbox."""

    id: str

    async def download(self, path: str, destination: Path) -> None:
        """Copy a file or directory from the sandbox to a local path."""
        ...

    def endpoint_url(self, url: str) -> str:
        """The address under which the sandbox reaches `url` on the host endpoint."""
        ...

    def control_socket_path(self, name: str) -> tuple[Path, str] | None:
        """A host path to bind a Unix socket at, and its path inside; None if the backend can't."""
        ...


@runtime_checkable
class SandboxBackend(Protocol):
    """Creates and deletes sandboxes of one kind."""

    name: str

    def available(self) -> str | None:
        """None when this backend can run here, else why not and how to fix it."""
        ...

    async def create(self, config: SandboxConfig, *, endpoint: EndpointTarget | None, labels: Sequence[str]) -> Sandbox:
        """A new sandbox; `endpoint` (when given) is reachable from inside it."""
        ...

    async def delete(self, sandbox_id: str) -> None:
        """Delete a sandbox by id, also one created by another (possibly dead) process."""
        ...


_INSTANCES: dict[str, SandboxBackend] = {}


def register_backend(name: str, factory: Callable[[], SandboxBackend]) -> None:
    """Make a backend available as `SandboxConfig(backend=name)`; registering the same factory again
    gives a fresh instance.

    Raises:
        PluginError: `name` is taken by another backend (a built-in's name included).
    """
    SANDBOX_BACKENDS.register(name, factory)
    _INSTANCES.pop(name, None)


def get_backend(name: str) -> SandboxBackend:
    """The backend registered as `name` (one instance per process).

    Raises:
        UnknownNameError: no backend has that name.
        PluginError: its plugin fails to import, or its factory does not make a `SandboxBackend`.
    """
    if name not in _INSTANCES:
        factory = SANDBOX_BACKENDS.get(name)
        where = f"sandbox backend {name!r} ({SANDBOX_BACKENDS.origin(name)})"
        try:
            backend = factory()
        except Exception as exc:
            raise PluginError(f"{where}: its factory failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(backend, SandboxBackend):
            raise PluginError(f"{where}: its factory returned type {type(backend).__name__!r}, not a SandboxBackend")
        _INSTANCES[name] = backend
    return _INSTANCES[name]


def backend_names() -> list[str]:
    """Names of the available backends: built-ins, registered in code, and installed plugins."""
    return SANDBOX_BACKENDS.names()


__all__ = [
    "Workspace",
    "EndpointTarget",
    "PIN_HEADER",
    "ExecResult",
    "OutputCallback",
    "Sandbox",
    "SandboxBackend",
    "SandboxRecord",
    "backend_names",
    "get_backend",
    "register_backend",
]
