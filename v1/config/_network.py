"""A sandbox's network policy: `"none"`, `"all"`, or hosts it may reach (`NetworkPolicy`).

An entry names a host and optionally a port (`host[:port]`): an exact name (`pypi.org`), a wildcard
of a domain's subdomains (`*.pythonhosted.org`: `files.pythonhosted.org`, not `pythonhosted.org`
itself), `*` (any name), or a literal address (`10.0.0.7`, `[2001:db8::1]:443`). Names match names
and addresses match addresses: `*` never lets a program reach an address it typed, so an allow list
of names is not bypassed by connecting to their addresses. `block` wins over `allow`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Literal

MAX_ENTRIES = 1024
LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
PORT = re.compile(r"[0-9]{1,5}")
NetworkMode = Literal["none", "all"]


@dataclass(frozen=True)
class HostRule:
    """One parsed entry: `kind` is "name" (exact), "wildcard" (`*.domain`, or `*` with `host` ""), or "address"."""

    kind: Literal["name", "wildcard", "address"]
    host: str
    port: int | None

    def matches(self, host: str, port: int, is_address: bool) -> bool:
        """Whether a connection to `host:port` (a lowercase name, or a canonical address) is this entry's."""
        if self.port is not None and self.port != port:
            return False
        if self.kind == "address":
            return is_address and host == self.host
        if is_address:
            return False
        if self.kind == "name":
            return host == self.host
        return not self.host or host.endswith("." + self.host)

    def covers(self, other: HostRule) -> bool:
        """Whether every connection `other` matches, this entry matches too."""
        if self.port is not None and self.port != other.port:
            return False
        if self.kind != "wildcard" or other.kind == "address":
            return self.kind == other.kind and self.host == other.host
        if not self.host:
            return True
        return other.host.endswith("." + self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.kind == "wildcard":
            host = f"*.{self.host}" if self.host else "*"
        return host if self.port is None else f"{host}:{self.port}"


def parse_rule(entry: str) -> HostRule:
    """The rule an allow or block entry names.

    Raises:
        ValueError: one line naming the entry and what is wrong with it.
    """
    if not isinstance(entry, str) or not entry:
        raise ValueError(f"{entry!r:.80} is not a host entry (non-empty `host[:port]`)")
    if any(ord(char) < 33 or ord(char) == 127 for char in entry):
        raise ValueError(f"{entry!r:.80}: an entry holds no spaces or control characters")
    if "://" in entry or "/" in entry or "@" in entry or "?" in entry or "#" in entry:
        raise ValueError(f"{entry!r:.80}: an entry is `host[:port]`, with no scheme, credentials or path")
    host, port = _split_port(entry)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return HostRule("address", address.compressed, port)
    if host.startswith("["):
        raise ValueError(f"{entry!r:.80}: {host!r:.80} is not an IPv6 address")
    name = host.lower()
    if name == "*":
        return HostRule("wildcard", "", port)
    wildcard = name.startswith("*.")
    domain = name[2:] if wildcard else name
    if len(domain) > 253 or not all(LABEL.fullmatch(label) for label in domain.split(".")):
        raise ValueError(f"{entry!r:.80}: {host!r:.80} is not a host name, `*.domain`, `*` or an IP address")
    if domain.replace(".", "").isdigit():
        raise ValueError(f"{entry!r:.80}: {host!r:.80} is not an IP address")
    return HostRule("wildcard" if wildcard else "name", domain, port)


def _split_port(entry: str) -> tuple[str, int | None]:
    """(host, port) of `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address."""
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r:.80}: an IPv6 address with a port is written `[address]:port`")
        return host if ipaddress_or_none(host) else f"[{host}]", _port(entry, rest[1:]) if rest else None
    if entry.count(":") > 1:
        return entry, None
    host, colon, port = entry.partition(":")
    return host, _port(entry, port) if colon else None


def ipaddress_or_none(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `text` spells, or None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _port(entry: str, text: str) -> int:
    if not PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ValueError(f"{entry!r:.80}: the port must be a number from 1 to 65535")
    return int(text)


def network_from_access(data: Any) -> Any:
    """`data` with the older `network_access` bool spelled as `network` (see `SandboxConfig.network_spelled`)."""
    if not isinstance(data, dict) or "network_access" not in data:
        return data
    data = dict(data)
    access = data.pop("network_access")
    if not isinstance(access, bool):
        raise ValueError(f"network_access must be true or false, got {access!r:.80}")
    spelled = "all" if access else "none"
    if "network" in data and data["network"] != spelled:
        raise ValueError(
            f"network_access={str(access).lower()} and network={data['network']!r:.120} disagree; give only `network`"
        )
    data["network"] = spelled
    return data


__all__ = ["MAX_ENTRIES", "HostRule", "NetworkMode", "network_from_access", "parse_rule"]
