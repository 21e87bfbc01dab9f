"""Whether a URL's host is this machine: a loopback name or address."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_CONNECT_S = 60.0
"""The least connect wait to a loopback host.

A connect there crosses no network: the kernel answers at once, from the listen backlog or with a
refusal. Waiting longer than that means only that this process was starved of CPU, so a short
connect timeout there turns a loaded machine into failed calls and buys nothing: a refusal is
still immediate.
"""


def is_loopback_url(url: str) -> bool:
    """Whether `url`'s host is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect_wait(url: str, connect_timeout: float) -> float:
    """The connect timeout in force for `url`: `connect_timeout`, raised to `LOOPBACK_CONNECT_S` on loopback."""
    return max(connect_timeout, LOOPBACK_CONNECT_S) if is_loopback_url(url) else connect_timeout
