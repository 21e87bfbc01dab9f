"""`EgressProxy`: a sandbox's only way out under a network policy, run on the host, outside the sandbox.

A local sandbox whose `network` is a `NetworkPolicy` has a network namespace of its own with
nothing in it but loopback: no interface, no route, no resolver. Its launcher listens on that
loopback at `PROXY_PORT` and relays each connection through a Unix socket (`EgressSockets`, one
per rollout) to this proxy, in v1's own process. The proxy speaks HTTP CONNECT (and plain HTTP
with an absolute URI), decides each `host:port` against the policy before it connects, and
answers 403 to what the policy does not allow. `HTTP_PROXY` and friends in the sandbox's
environment only point programs at it: a program that unsets them has no other route.

The proxy resolves names itself: the sandbox has no resolver, so a name reaches nothing the
policy does not name. Names match name entries and addresses match address entries, so a program
that connects to an allowed name's address bypasses nothing. A connection that lands on this
machine (a loopback, unspecified or link-local address, or any address of the host's own) needs
an exact allow entry (no wildcard), and never reaches the endpoint's port: the endpoint is
reached through its own relay only. Connects are bounded by `CONNECT_TIMEOUT_S`.

Each rollout's allowed and denied connections are counted in a `NetworkTally`, which the harness
records as `state["network"]` (at most `MAX_DENIED_HOSTS` denied hosts are named).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from v1.config import NetworkPolicy
from v1.sandbox._backend import EndpointTarget
from v1.sandbox._endpoint_relay import HEAD_TIMEOUT_S, MAX_CONNECTIONS, RolloutSockets, pump, read_head

PROXY_PORT = 3128
"""Where the sandbox's loopback offers the proxy (`PROXY_PORT + 1` when the endpoint's port is this one)."""
CONNECT_TIMEOUT_S = 15.0
RESOLVE_TIMEOUT_S = 10.0
MAX_DENIED_HOSTS = 32
LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
_HOP_HEADERS = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te", b"upgrade"}


@dataclass
class NetworkTally:
    """Connections one rollout's commands made through the proxy: what the policy allowed and denied."""

    allowed: int = 0
    denied: int = 0
    denied_hosts: list[str] = field(default_factory=list)

    def deny(self, target: str) -> None:
        self.denied += 1
        if target not in self.denied_hosts and len(self.denied_hosts) < MAX_DENIED_HOSTS:
            self.denied_hosts.append(target[:300])

    def as_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "denied": self.denied, "denied_hosts": list(self.denied_hosts)}


_TALLIES: dict[str, NetworkTally] = {}


def rollout_tally(rollout: str) -> NetworkTally:
    """The tally of `rollout`'s connections (made on first use)."""
    return _TALLIES.setdefault(rollout, NetworkTally())


def network_tally(rollout: str, *, done: bool = False) -> dict[str, Any] | None:
    """`rollout`'s connections through an egress proxy so far, None when it made none; `done` forgets them."""
    tally = _TALLIES.pop(rollout, None) if done else _TALLIES.get(rollout)
    return tally.as_dict() if tally is not None else None


def proxy_port(endpoint: EndpointTarget | None) -> int:
    return PROXY_PORT + 1 if endpoint is not None and endpoint.port == PROXY_PORT else PROXY_PORT


def proxy_env(port: int, endpoint: EndpointTarget | None) -> dict[str, str]:
    """The variables that point a sandbox's programs at the proxy (a convenience: there is no other way out)."""
    url = f"http://127.0.0.1:{port}"
    no_proxy = endpoint.host if endpoint is not None else ""
    return {
        **{name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
    }


def _answer(status: str, text: str) -> bytes:
    body = f"v1 sandbox network policy: {text}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@dataclass(frozen=True)
class _Request:
    host: str
    port: int
    is_address: bool
    head: bytes | None
    """The head to send upstream (plain HTTP, origin-form); None for CONNECT."""


def parse_request(head: bytes) -> _Request | None:
    """The target of a CONNECT or absolute-URI request head, None when it is neither or malformed."""
    lines = head.removesuffix(b"\r\n\r\n").split(b"\r\n")
    if any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines):
        return None
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        return None
    if not version.startswith("HTTP/1.") or not method.isalpha():
        return None
    if method == "CONNECT":
        split = urlsplit(f"//{target}")
        if split.path or split.query or split.fragment or split.username is not None:
            return None
        return _target(split, None, None)
    split = urlsplit(target)
    if split.scheme != "http" or split.username is not None:
        return None
    kept = [f"{method} {split.path or '/'}{'?' + split.query if split.query else ''} {version}".encode()]
    for line in lines[1:]:
        name, colon, _ = line.partition(b":")
        if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            return None
        if name.lower() not in _HOP_HEADERS:
            kept.append(line)
    kept.append(b"Connection: close")
    return _target(split, 80, b"\r\n".join(kept) + b"\r\n\r\n")


def _target(split: Any, default_port: int | None, head: bytes | None) -> _Request | None:
    try:
        host, port = split.hostname, split.port or default_port
    except ValueError:
        return None
    if not host or port is None or not 0 < port < 65536:
        return None
    try:
        return _Request(ipaddress.ip_address(host).compressed, port, True, head)
    except ValueError:
        pass
    name = host.rstrip(".") if host.endswith(".") and not host.endswith("..") else host
    if len(name) > 253 or not all(LABEL.fullmatch(label) for label in name.split(".")):
        return None
    return _Request(name, port, False, head)


def _is_this_machine(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast


class EgressProxy:
    """Serves one rollout's connections out of a sandbox; see the module docs."""

    def __init__(
        self,
        policy: NetworkPolicy,
        endpoint: EndpointTarget | None,
        tally: NetworkTally,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.allow = policy.allow_rules()
        self.block = policy.block_rules()
        self.endpoint = endpoint
        self.tally = tally
        self.max_connections = max_connections
        self.open = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection from the sandbox: its request decided, then relayed or refused."""
        if self.open >= self.max_connections:
            await _send_and_close(writer, _answer("503 Service Unavailable", "too many connections open; retry later"))
            return
        self.open += 1
        try:
            await self._serve(reader, writer)
        finally:
            self.open -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head, rest = await asyncio.wait_for(read_head(reader), HEAD_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        request = parse_request(head)
        if request is None:
            await _send_and_close(writer, _answer("400 Bad Request", "expected CONNECT host:port or an http:// URL"))
            return
        shown = f"[{request.host}]:{request.port}" if ":" in request.host else f"{request.host}:{request.port}"
        try:
            up_reader, up_writer = await self._open(request)
        except _Refused as refused:
            if refused.status.startswith("403"):
                self.tally.deny(shown)
            await _send_and_close(writer, _answer(refused.status, f"{shown}: {refused.why}"))
            return
        self.tally.allowed += 1
        if request.head is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(request.head)
        up_writer.write(rest)
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def _open(self, request: _Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `request`'s target that the policy allows.

        Raises:
            _Refused: with 403 when the policy does not allow it, 502/504 when it can't be made.
        """
        allowed_by = [rule for rule in self.allow if rule.matches(request.host, request.port, request.is_address)]
        if not allowed_by:
            raise _Refused("403 Forbidden", "not in the sandbox's network allow list")
        if any(rule.matches(request.host, request.port, request.is_address) for rule in self.block):
            raise _Refused("403 Forbidden", "in the sandbox's network block list")
        exact = any(rule.kind != "wildcard" for rule in allowed_by)
        addresses = [request.host] if request.is_address else await self._resolve(request.host, request.port)
        if not addresses:
            raise _Refused("502 Bad Gateway", "the name does not resolve")
        for address in addresses:
            if any(rule.matches(address, request.port, True) for rule in self.block):
                raise _Refused("403 Forbidden", f"resolves to {address}, in the sandbox's network block list")
            if _is_this_machine(address):
                self._check_this_machine(request.port, exact)
        return await self._connect(addresses, request.port, exact)

    def _check_this_machine(self, port: int, exact: bool) -> None:
        """This machine is reached only through an exact allow entry, and its endpoint never through the proxy."""
        if self.endpoint is not None and port == self.endpoint.port:
            raise _Refused("403 Forbidden", "the endpoint is reached through its own relay, never through the proxy")
        if not exact:
            raise _Refused("403 Forbidden", "this machine is reached only through an exact allow entry, not a wildcard")

    async def _resolve(self, host: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, UnicodeError):
            return []
        return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0]).compressed for info in infos))

    async def _connect(self, addresses: list[str], port: int, exact: bool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        failure = _Refused("502 Bad Gateway", "the connection failed")
        for address in addresses:
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT_S)
            except asyncio.TimeoutError:
                failure = _Refused("504 Gateway Timeout", f"no answer within {CONNECT_TIMEOUT_S:g} s")
                continue
            except OSError:
                continue
            peer, local = up_writer.get_extra_info("peername"), up_writer.get_extra_info("sockname")
            if peer is not None and local is not None and peer[0] == local[0]:  # an address of this machine's own
                try:
                    self._check_this_machine(port, exact)
                except _Refused:
                    up_writer.close()  # nothing was sent
                    raise
            return up_reader, up_writer
        raise failure


class _Refused(Exception):
    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


async def _send_and_close(writer: asyncio.StreamWriter, answer: bytes) -> None:
    with contextlib.suppress(Exception):
        writer.write(answer)
        await asyncio.wait_for(writer.drain(), 1)
    writer.close()


def egress_socket_name(rollout: str | None) -> str:
    """A rollout's egress socket's file name (short: socket paths hold 108 bytes)."""
    key = hashlib.sha256(rollout.encode()).hexdigest()[:16] if rollout is not None else "setup"
    return f"egress-{key}.sock"


class EgressSockets(RolloutSockets):
    """A sandbox's egress sockets: one per rollout (and one for commands of none) while its commands run."""

    def __init__(self, policy: NetworkPolicy, endpoint: EndpointTarget | None, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.policy = policy
        self.endpoint = endpoint
        self.unattributed = NetworkTally()

    def socket_name(self, rollout: str | None) -> str:
        return egress_socket_name(rollout)

    def handler(self, rollout: str | None) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        tally = rollout_tally(rollout) if rollout is not None else self.unattributed
        return EgressProxy(self.policy, self.endpoint, tally).serve


__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_DENIED_HOSTS",
    "PROXY_PORT",
    "EgressProxy",
    "EgressSockets",
    "NetworkTally",
    "network_tally",
    "parse_request",
    "proxy_env",
    "proxy_port",
    "rollout_tally",
]
