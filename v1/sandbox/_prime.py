"""The `prime` sandbox backend: remote sandboxes through the `prime-sandboxes` SDK (extra `[sandbox]`).

The seed's fields map onto the SDK's `CreateSandboxRequest`: `image` ->
`docker_image` (default `python:3.11-slim`), `start_command`, `cpu_cores`,
`memory_gb`, `disk_size_gb`, `gpu_count`, `timeout_minutes` (rounded up),
`env` -> `environment_vars`, `labels`, `team_id`, `advanced_configs`, and `network` ->
`network_allowlist` / `network_denylist` (see `egress_fields`). The SDK reads its credentials itself
(`PRIME_API_KEY`, `PRIME_API_BASE_URL`, `~/.prime`). Commands run through the
SDK's `execute_command`, which returns when the command ends, so `on_output`
gets the output in one piece per stream. A remote sandbox cannot reach the
rollout's endpoint on this machine's loopback: a `Tunnel` must publish it
(`V1_SANDBOX_TUNNEL="module:factory"`), and the program's URLs are rewritten to
the tunnel's public address. There is no Unix-socket control channel, so
sandboxed `fn` programs need the local backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shlex
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from v1.config import NetworkPolicy, SandboxConfig, import_ref
from v1.errors import ConfigError, SandboxError
from v1.sandbox._backend import EndpointTarget, ExecResult, OutputCallback
from v1.sandbox._host_files import walk_host_tree
from v1.sandbox._local import sandbox_user

DEFAULT_IMAGE = "python:3.11-slim"
INSTALL_HINT = "install it with `pip install 'v1[sandbox]'` (or `pip install prime-sandboxes`)"


@runtime_checkable
class Tunnel(Protocol):
    """Publishes a local TCP address so a remote sandbox can reach it."""

    async def open(self, target: EndpointTarget) -> str:
        """Start forwarding to `target`; returns the public base URL (scheme://host[:port])."""
        ...

    async def close(self) -> None:
        """Stop forwarding."""
        ...


class StaticTunnel:
    """A tunnel someone else runs: `target` is already reachable at `public_url` (a reverse proxy, ngrok, ...)."""

    def __init__(self, public_url: str) -> None:
        self.public_url = public_url.rstrip("/")

    async def open(self, target: EndpointTarget) -> str:
        return self.public_url

    async def close(self) -> None:
        return None


def tunnel_from_environment() -> Tunnel | None:
    """The tunnel named by `V1_SANDBOX_TUNNEL`: a `module:factory` ref, or a URL for a `StaticTunnel`.

    Raises:
        ConfigError: the reference does not resolve to a tunnel.
    """
    value = os.environ.get("V1_SANDBOX_TUNNEL")
    if not value:
        return None
    if value.startswith(("http://", "https://")):
        return StaticTunnel(value)
    factory = import_ref(value, "V1_SANDBOX_TUNNEL")
    tunnel = factory() if callable(factory) and not isinstance(factory, Tunnel) else factory
    if not isinstance(tunnel, Tunnel):
        raise ConfigError(f"V1_SANDBOX_TUNNEL={value!r} is not a Tunnel (async open(target) -> url, async close())")
    return tunnel


def rewrite_url(url: str, public_base: str) -> str:
    """`url` (an endpoint URL on the host) with its scheme and host replaced by the tunnel's."""
    public = urlsplit(public_base)
    original = urlsplit(url)
    path = public.path.rstrip("/") + original.path
    return urlunsplit((public.scheme, public.netloc, path, original.query, original.fragment))


def egress_fields(network: str | NetworkPolicy, public_url: str | None) -> dict[str, list[str]]:
    """The SDK's egress lists for a sandbox's `network`, the tunnel's host allowed so the endpoint stays reachable.

    `"all"`: none; `"none"`: an allow list of the tunnel's host; an allow list: the SDK's (plus the tunnel's
    host); `allow = ["*"]` with blocks: the SDK's block list. The SDK checks the entries it can't take.

    Raises:
        SandboxError: a policy the SDK's lists can't express (an allow list with blocks: they are exclusive;
            IPv6 entries).
    """
    if network == "all":
        return {}
    tunnel = [_tunnel_entry(public_url)] if public_url is not None else []
    if network == "none":
        return {"network_allowlist": tunnel}
    assert isinstance(network, NetworkPolicy)
    if network.allow == ["*"]:
        return {"network_denylist": list(network.block)} if network.block else {}
    if network.block:
        raise SandboxError(
            "the prime backend can't enforce an allow list with blocks (its allow and block lists are exclusive); "
            "leave block empty, or use allow = ['*'] with blocks, or the local backend"
        )
    ipv6 = [entry for entry in network.allow if entry.startswith("[") or entry.count(":") > 1]
    if ipv6:
        raise SandboxError(f"the prime backend can't enforce IPv6 entries ({ipv6[0]!r}); use IPv4 addresses or names")
    return {"network_allowlist": list(dict.fromkeys([*network.allow, *tunnel]))}


def _tunnel_entry(public_url: str) -> str:
    split = urlsplit(public_url)
    host = split.hostname or ""
    return f"{host}:{split.port}" if split.port is not None else host


def create_request_fields(
    config: SandboxConfig, name: str, labels: Sequence[str], public_url: str | None = None
) -> dict[str, Any]:
    """The SDK's `CreateSandboxRequest` fields for a `SandboxConfig` (`public_url`: the endpoint's tunnel, if any)."""
    fields: dict[str, Any] = {
        "name": name,
        "docker_image": config.image or DEFAULT_IMAGE,
        "cpu_cores": config.cpu_cores,
        "memory_gb": config.memory_gb,
        "disk_size_gb": config.disk_size_gb,
        "gpu_count": config.gpu_count,
        "timeout_minutes": max(1, math.ceil(config.timeout_minutes)),
        "labels": list(labels),
    }
    if config.start_command is not None:
        executable, *args = shlex.split(config.start_command)
        fields["start_command"] = {"executable": executable, "args": args}
    if config.env:
        fields["environment_vars"] = dict(config.env)
    if config.team_id is not None:
        fields["team_id"] = config.team_id
    if config.advanced_configs is not None:
        fields["advanced_configs"] = dict(config.advanced_configs)
    if config.packages and config.network == "none":
        raise SandboxError(
            "the prime backend applies a sandbox's network policy to its package install too, and network is 'none': "
            "allow the package index's hosts (e.g. network = {allow = ['pypi.org', 'files.pythonhosted.org']}) "
            "or use network = 'all'"
        )
    return fields | egress_fields(config.network, public_url)


class PrimeSandbox:
    """One remote sandbox, driven through the SDK's async client."""

    def __init__(self, client: Any, sandbox_id: str, config: SandboxConfig, public_url: str | None) -> None:
        self.client = client
        self.id = sandbox_id
        self.config = config
        self.workdir = config.workdir
        self.public_url = public_url

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"

    def endpoint_url(self, url: str) -> str:
        if self.public_url is None:
            raise SandboxError("this prime sandbox has no tunnel to the endpoint; set V1_SANDBOX_TUNNEL")
        return rewrite_url(url, self.public_url)

    def control_socket_path(self, name: str) -> tuple[Path, str] | None:
        return None

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
        if stdin is not None:
            raise SandboxError("the prime backend can't write to a command's stdin; pass the input in a file")
        started = time.monotonic()
        seconds = max(1, math.ceil(timeout if timeout is not None else self.config.command_timeout))
        from prime_sandboxes import CommandTimeoutError

        try:
            response = await self.client.execute_command(
                self.id,
                shlex.join(command),
                working_dir=cwd or self.workdir,
                env={**self.config.env, **dict(env or {})},
                timeout=seconds,
            )
        except CommandTimeoutError:
            return ExecResult(exit_code=137, timed_out=True, duration=time.monotonic() - started)
        if on_output is not None:
            for stream, text in (("stdout", response.stdout), ("stderr", response.stderr)):
                if text:
                    on_output(stream, text.encode())
        return ExecResult(
            exit_code=response.exit_code,
            stdout=response.stdout or "",
            stderr=response.stderr or "",
            duration=time.monotonic() - started,
        )

    async def upload(self, source: Path, destination: str) -> None:
        """Each regular file of `source` (read as `walk_host_tree` reads it), one SDK upload apiece.

        Raises:
            SandboxError: what `walk_host_tree` refuses, and a symlink (the SDK uploads files only).
        """
        entries = await asyncio.to_thread(lambda: list(walk_host_tree(source, sandbox_user())))
        for entry in entries:
            if entry.kind == "link":
                raise SandboxError(f"{source}/{entry.path}: a symlink; the prime backend uploads regular files only")
        for entry in entries:
            if entry.kind == "file":
                target = destination if not entry.path else f"{destination.rstrip('/')}/{entry.path}"
                await self.write_file(target, entry.content)

    async def write_file(self, destination: str, content: bytes) -> None:
        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / "upload"
            await asyncio.to_thread(local.write_bytes, content)
            await self.client.upload_file(self.id, self._path(destination), str(local))

    async def read_file(self, path: str, max_bytes: int) -> bytes:
        from prime_sandboxes import APIError

        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / "download"
            try:
                await self.client.download_file(self.id, self._path(path), str(local))
            except APIError as exc:
                if "404" in str(exc) or "not found" in str(exc).lower():
                    raise FileNotFoundError(path) from exc
                raise
            data = await asyncio.to_thread(local.read_bytes)
        if len(data) > max_bytes:
            raise SandboxError(f"{path!r} is larger than its limit of {max_bytes} bytes")
        return data

    async def download(self, path: str, destination: Path) -> None:
        await self.client.download_file(self.id, self._path(path), str(destination))


class PrimeBackend:
    """Creates `PrimeSandbox`es through the prime-sandboxes SDK; see the module docs."""

    name = "prime"

    def __init__(self, tunnel: Tunnel | None = None) -> None:
        self.tunnel = tunnel
        self._client: Any = None
        self._public_url: str | None = None
        self._tunnel_lock: asyncio.Lock | None = None

    def available(self) -> str | None:
        try:
            import prime_sandboxes  # noqa: F401
        except ImportError:
            return f"the prime sandbox backend needs the prime-sandboxes SDK; {INSTALL_HINT}"
        return None

    def client(self) -> Any:
        if self._client is None:
            from prime_sandboxes import AsyncSandboxClient

            self._client = AsyncSandboxClient()
        return self._client

    async def _public_endpoint(self, endpoint: EndpointTarget) -> str:
        if self._tunnel_lock is None:
            self._tunnel_lock = asyncio.Lock()
        async with self._tunnel_lock:  # held only while the tunnel opens, once per process
            if self._public_url is None:
                tunnel = self.tunnel or tunnel_from_environment()
                if tunnel is None:
                    raise SandboxError(
                        "a prime sandbox can't reach this machine's endpoint without a tunnel: set "
                        "V1_SANDBOX_TUNNEL to a public URL that forwards to the endpoint, or to a 'module:factory' Tunnel"
                    )
                self.tunnel = tunnel
                self._public_url = await tunnel.open(endpoint)
        return self._public_url

    async def create(self, config: SandboxConfig, *, endpoint: EndpointTarget | None, labels: Sequence[str]) -> PrimeSandbox:
        from prime_sandboxes import CreateSandboxRequest
        from pydantic import ValidationError

        if config.mounts:
            raise SandboxError(
                "a prime sandbox cannot see this machine's directories (mounts); install what it needs with packages"
            )

        public_url = await self._public_endpoint(endpoint) if endpoint is not None else None
        client = self.client()
        fields = create_request_fields(config, f"v1-{uuid.uuid4().hex[:12]}", ["v1", *labels], public_url)
        try:
            request = CreateSandboxRequest(**fields)
        except ValidationError as exc:
            why = "; ".join(str(error["msg"]) for error in exc.errors())
            if "network_" not in why:
                raise
            raise SandboxError(f"the prime backend can't take this sandbox's network policy: {why}"[:600]) from None
        created = await client.create(request)
        try:
            await client.wait_for_creation(created.id)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.delete(created.id)
            raise
        return PrimeSandbox(client, created.id, config, public_url)

    async def delete(self, sandbox_id: str) -> None:
        await self.client().delete(sandbox_id)


__all__ = [
    "PrimeBackend",
    "PrimeSandbox",
    "StaticTunnel",
    "Tunnel",
    "create_request_fields",
    "egress_fields",
    "rewrite_url",
    "tunnel_from_environment",
]
