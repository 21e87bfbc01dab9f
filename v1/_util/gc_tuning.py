"""`batch_gc()`: the cyclic garbage collector tuned for many rollouts in flight at once.

With hundreds of rollouts in flight, CPython's default collector (a young-generation
collection every 700 net allocations, a full one every 100 of those) spent about a
third of a single-turn rollout's CPU re-scanning the live rollouts' objects (measured
with `gc.callbacks`, see benchmarks/README.md). Inside `batch_gc()` the young generation
holds `YOUNG_THRESHOLD` net allocations (default 700) and each older generation waits
for `OLDER_THRESHOLD` collections of the one below (default 10); reference counting
still frees everything that is not in a cycle at once, and a collector that is off
(`gc.disable()`, threshold 0) stays off. `Env.generate`'s units run inside it (on this loop or a Ray actor, so `v1 eval` too); a program
that runs many `harness.run` calls concurrently itself can use it too. Entering is
cheap; nesting and overlapping uses (several runs on one loop, several threads) keep
the tuned thresholds until the last one leaves, then restore what was set before.
`V1_BATCH_GC=0` leaves the collector alone.

`frozen_heap()` is for a long run that loads large libraries first (the trainer): what is alive
when it starts (torch, transformers, the model's modules) is never scanned again.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

BATCH_GC_ENV = "V1_BATCH_GC"
"""Set to ``0`` to leave the collector's thresholds as they are."""
YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLD = 20

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


@contextmanager
def batch_gc() -> Iterator[None]:
    """Raise the collector's thresholds for the duration of a batch of rollouts (see the module doc)."""
    if os.environ.get(BATCH_GC_ENV, "1") == "0":
        yield
        return
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            young, older, oldest = _saved
            if young > 0:
                gc.set_threshold(max(young, YOUNG_THRESHOLD), max(older, OLDER_THRESHOLD), max(oldest, OLDER_THRESHOLD))
        _depth += 1


def _leave() -> None:
    global _depth, _saved
    with _lock:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None


def freeze_heap() -> None:
    """Collect, then move every object alive now out of the cyclic GC's reach (`gc.freeze`).

    With torch, transformers and the SDKs loaded a full collection walks ~600k objects (~0.25 s),
    and a step's rollouts allocate enough to trigger one every few steps. Frozen objects are still
    freed by reference counting; only cycles among them wait for `gc.unfreeze`.
    """
    gc.collect()
    gc.freeze()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """`freeze_heap` now, `gc.unfreeze` on the way out (unless something had frozen objects before: then it is theirs)."""
    frozen_before = gc.get_freeze_count()
    freeze_heap()
    try:
        yield
    finally:
        if frozen_before == 0:
            gc.unfreeze()


__all__ = ["BATCH_GC_ENV", "OLDER_THRESHOLD", "YOUNG_THRESHOLD", "batch_gc", "freeze_heap", "frozen_heap"]
