"""`BodyBudget`: how many bytes of request bodies the endpoint holds at once, per rollout and in all.

A program can open many connections and declare a large body on each: read whole, each costs the
endpoint its size until the request is answered. So every authorized request reserves the size its
`Content-Length` declares (the largest body allowed when it declares none: a chunked body) before
a byte of it is read, and keeps it until answered. A rollout holds at most `per_rollout` bytes at
once and the process at most `total`; a request that would pass either is refused at once with a
413 in its dialect's shape, its body never read.
"""

from __future__ import annotations

from collections.abc import Mapping

PROCESS_FACTOR = 16
"""The process's budget, in largest bodies: that many rollouts may each send one at once."""
BODIED_METHODS = ("POST", "PUT", "PATCH")


def declared_size(method: str, headers: Mapping[str, str], max_body_bytes: int) -> int:
    """The bytes a request's body may hold: its `Content-Length`, else the largest body when its method has one.

    A `Content-Length` that is not a decimal count is taken as the largest body (the HTTP parser refuses it anyway).
    """
    raw = headers.get("Content-Length")
    if raw is not None and raw.strip().isdigit():
        return int(raw.strip())
    return max_body_bytes if method.upper() in BODIED_METHODS else 0


class BodyBudget:
    """Bytes of request bodies reserved by requests being answered; see the module docs."""

    def __init__(self, per_rollout: int, total: int) -> None:
        self.per_rollout = per_rollout
        self.total = total
        self.held = 0
        self.held_by: dict[str, int] = {}
        self.refused = 0

    def take(self, rollout: str, size: int) -> str | None:
        """Reserve `size` bytes for a request of `rollout`: None when reserved, else why not (nothing reserved)."""
        held = self.held_by.get(rollout, 0)  # a plain dict: a Counter's miss is a Python call
        if held + size > self.per_rollout:
            self.refused += 1
            return f"this rollout's requests hold {held} bytes of bodies already, of {self.per_rollout}"
        if self.held + size > self.total:
            self.refused += 1
            return f"the endpoint holds {self.held} bytes of request bodies already, of {self.total}"
        self.held += size
        self.held_by[rollout] = held + size
        return None

    def give_back(self, rollout: str, size: int) -> None:
        """The request that took `size` bytes for `rollout` was answered."""
        self.held -= size
        left = self.held_by.get(rollout, 0) - size
        if left > 0:
            self.held_by[rollout] = left
        else:
            self.held_by.pop(rollout, None)


__all__ = ["PROCESS_FACTOR", "BodyBudget", "declared_size"]
