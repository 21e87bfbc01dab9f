"""`PromptCache`: a chat prompt's token ids, rendered and tokenized once per distinct prompt.

A trainer's round asks for the same prompt `rollouts_per_example` times at once, and the same
rows come back in later rounds. Rendering the chat template and tokenizing costs a thread hop
and ~0.3 ms each time; a hit costs a dictionary lookup on the event loop. Concurrent misses
under one key share one rendering (`SingleFlight`), so a group of 8 renders once. The cache
is bounded by the tokens it holds, least recently used first out. A render that fails is not
kept: every caller that joined it gets the error, and the next request renders again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from v1._util.single_flight import SingleFlight

DEFAULT_MAX_TOKENS = 1 << 20
"""Token ids held at most (about 8 MiB of references): a few thousand typical prompts."""


class PromptCache:
    """Token ids by prompt key, least recently used dropped past `max_tokens`.

    Args:
        max_tokens: most token ids held in all; a prompt longer than this is never kept.
    """

    hits: int
    """Requests answered without rendering: from a kept entry or by joining a render in flight."""
    misses: int
    """Renders run."""

    def __init__(self, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.hits = 0
        self.misses = 0
        self._held = 0
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._rendering: SingleFlight[str, tuple[int, ...]] = SingleFlight()

    def __len__(self) -> int:
        return len(self._ids)

    async def ids(self, key: str, render: Callable[[], list[int]]) -> list[int]:
        """The ids for `key`: kept ones, or `render()`'s (run in a worker thread, once for concurrent callers)."""
        kept = self._ids.get(key)
        if kept is not None:
            self._ids.move_to_end(key)
            self.hits += 1
            return list(kept)
        rendering = self._rendering.pending(key)
        if rendering is not None:
            self.hits += 1
            return list(await asyncio.shield(rendering))
        self.misses += 1
        return list(await self._rendering.run(key, lambda: self._render(key, render), join=False))

    async def _render(self, key: str, render: Callable[[], list[int]]) -> tuple[int, ...]:
        ids = tuple(await asyncio.to_thread(render))
        self._keep(key, ids)
        return ids

    def _keep(self, key: str, ids: tuple[int, ...]) -> None:
        if len(ids) > self.max_tokens:
            return
        previous = self._ids.pop(key, None)
        self._held -= len(previous) if previous is not None else 0
        self._ids[key] = ids
        self._held += len(ids)
        while self._held > self.max_tokens:
            _, dropped = self._ids.popitem(last=False)
            self._held -= len(dropped)


__all__ = ["DEFAULT_MAX_TOKENS", "PromptCache"]
