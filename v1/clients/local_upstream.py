"""Upstreams served by this process: an OpenAI-compatible server here answers `OpenAIWire`'s whole-answer posts without a socket.

The built-in inference server (`v1.inference.InferenceServer`) registers its base URL and its
in-process entry when it starts, on its event loop. An `OpenAIWire` posting to that exact base
URL from the same loop hands the request's JSON bytes to that entry and gets the answer's JSON
back: the same validation, generation and answer as over HTTP, minus loopback TCP and HTTP
parsing. Everything above the wire (the interception endpoint, its records, the harness) is
unchanged. Streams, other loops and an entry that declines (None) go over HTTP as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

LocalAnswer = Callable[[str, bytes], Awaitable[tuple[int, Any] | None]]
"""``(path under the base URL, request body) -> (status, JSON answer)``, or None: send it over HTTP."""


@dataclass(frozen=True)
class LocalUpstream:
    """A server of this process: its entry and the loop it serves on."""

    answer: LocalAnswer
    loop: asyncio.AbstractEventLoop


_UPSTREAMS: dict[str, LocalUpstream] = {}


def _key(base_url: str) -> str:
    return base_url.rstrip("/")


def register_local_upstream(base_url: str, answer: LocalAnswer, loop: asyncio.AbstractEventLoop) -> None:
    """Serve posts to `base_url` made on `loop` with `answer`, in process."""
    _UPSTREAMS[_key(base_url)] = LocalUpstream(answer, loop)


def unregister_local_upstream(base_url: str, answer: LocalAnswer) -> None:
    """Stop serving `base_url` in process (only if `answer` is still the one registered)."""
    upstream = _UPSTREAMS.get(_key(base_url))
    if upstream is not None and upstream.answer == answer:
        del _UPSTREAMS[_key(base_url)]


def local_upstream(base_url: str) -> LocalAnswer | None:
    """The in-process entry for `base_url` when it serves the running loop, else None."""
    upstream = _UPSTREAMS.get(_key(base_url))
    if upstream is None:
        return None
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return upstream.answer if running is upstream.loop else None


__all__ = ["LocalAnswer", "LocalUpstream", "local_upstream", "register_local_upstream", "unregister_local_upstream"]
