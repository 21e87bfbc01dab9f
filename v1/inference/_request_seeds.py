"""`RequestSeeds`: per-request sampling seeds that make a server's runs reproducible whatever order requests arrive in.

A trainer's round sends many rollouts of the same prompts at once; which rollout reaches the
server first varies from run to run. A seed drawn per arrival would give a rollout another
seed in another run. Instead, a request's seed is derived from the server's seed, the weight
version, its prompt's token ids and how many requests for that prompt came before it under
those weights: the k-th rollout of a prompt is sampled alike in every run (rollouts of one
prompt are interchangeable), and a prompt that comes back after a weight update gets fresh
draws. The counts restart at each weight version, and after `MAX_COUNTED_PROMPTS` distinct
prompts, so memory stays bounded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from v1.clients import ids_digest

MAX_COUNTED_PROMPTS = 1 << 20
"""Distinct prompts counted per weight version before the counting starts afresh."""
MAX_SEED = 2**62
"""Seeds stay below this: the engine adds each choice's index to its request's seed."""


class RequestSeeds:
    """The seeds of a server started with `seed` (in ``[0, 2**63)``); used on one event loop."""

    def __init__(self, seed: int) -> None:
        if not 0 <= seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {seed}")
        self.seed = seed
        self._counts: dict[str, int] = {}
        self._version = 0

    def next(self, prompt: Sequence[int], n: int, weight_version: int) -> int:
        """The seed of the next request for `prompt` with `n` choices under `weight_version`."""
        if weight_version != self._version or len(self._counts) >= MAX_COUNTED_PROMPTS:
            self._counts.clear()
            self._version = weight_version
        digest = ids_digest(prompt)
        earlier = self._counts.get(digest, 0)
        self._counts[digest] = earlier + n
        mixed = hashlib.blake2b(f"{self.seed}:{weight_version}:{earlier}:{digest}".encode(), digest_size=8).digest()
        return int.from_bytes(mixed, "big") % MAX_SEED


__all__ = ["MAX_COUNTED_PROMPTS", "MAX_SEED", "RequestSeeds"]
