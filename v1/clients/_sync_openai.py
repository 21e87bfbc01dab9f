"""A sync `openai.OpenAI` client used where an `AsyncOpenAI` is expected (seed 004's and chatan's callers pass one).

Each call of the sync SDK runs on a thread of the adapter's own pool, never on the event loop, so
one slow call does not stall the other rollouts; the pool's size bounds how many calls are in flight.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

logger = logging.getLogger(__name__)

SYNC_CLIENT_THREADS = ("V1_SYNC_CLIENT_THREADS", 64)
"""The environment variable and default for the most calls of one sync client in flight at once."""


def sync_client_threads() -> int:
    """The size of each sync client's thread pool (`V1_SYNC_CLIENT_THREADS`, else 64)."""
    variable, default = SYNC_CLIENT_THREADS
    raw = os.environ.get(variable, "").strip()
    return max(1, int(raw)) if raw.isdigit() else default


class _ThreadedResource:
    """One SDK resource (`chat.completions`, `completions`) whose `create` runs on the pool and answers JSON."""

    def __init__(self, resource: Any, pool: ThreadPoolExecutor) -> None:
        self._resource = resource
        self._pool = pool

    def _create_json(self, request: dict[str, Any]) -> Any:
        return self._resource.with_raw_response.create(**request).http_response.json()

    async def create(self, **request: Any) -> Any:
        """`create(**request)` of the sync SDK on a pool thread; the answer as the JSON the server sent."""
        call = functools.partial(self._create_json, request)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)


class _Chat:
    def __init__(self, completions: _ThreadedResource) -> None:
        self.completions = completions


class ThreadedOpenAI:
    """An `AsyncOpenAI`-like view of a sync `openai.OpenAI`: `chat.completions.create` and
    `completions.create` are awaitable and run the sync SDK on a bounded thread pool of their own.

    Args:
        client: the sync `openai.OpenAI` (its base URL, key, headers and retries are used as they are).
        threads: the most calls in flight at once (`V1_SYNC_CLIENT_THREADS`, else 64, when None).
    """

    def __init__(self, client: Any, threads: int | None = None) -> None:
        size = threads if threads is not None else sync_client_threads()
        self.sync_client = client
        self.base_url = client.base_url
        self.api_key = client.api_key
        self.pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="v1-sync-openai")
        self.chat = _Chat(_ThreadedResource(client.chat.completions, self.pool))
        self.completions = _ThreadedResource(client.completions, self.pool)
        logger.info(
            "client: a sync openai.OpenAI (%s); its calls run on %d threads of their own, off the event loop "
            "(pass an AsyncOpenAI to avoid the threads)",
            client.base_url,
            size,
        )

    def close(self) -> None:
        """Stop the pool's threads once their calls finish (the sync client itself stays its owner's)."""
        self.pool.shutdown(wait=False)


__all__ = ["SYNC_CLIENT_THREADS", "ThreadedOpenAI", "sync_client_threads"]
