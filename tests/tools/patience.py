"""How long tests wait: so long that only a hang runs out, never a slow or loaded machine.

A test's deadline is a hang guard, not a measure of speed: under a load of 20 a Python
process that imports v1 can take a minute to print its first line. Waits end as soon as
what they wait for happens, or as soon as the process that should make it happen has died.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator

HANG_S = 900.0
"""The longest a test waits for one thing; reached only when something hangs."""


def wait_until(
    condition: Callable[[], object], what: str, *, process: subprocess.Popen[str] | subprocess.Popen[bytes] | None = None
) -> None:
    """Poll `condition` until it holds; fail at once if `process` exits first, or after `HANG_S`."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"waiting for {what}: the process exited with {process.returncode} first")
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {HANG_S:.0f} s for {what}: it hangs")
        time.sleep(0.02)


async def arrives(condition: Callable[[], object], what: str) -> None:
    """In a coroutine: poll `condition` until it holds, letting the event loop run; fail after `HANG_S`."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {HANG_S:.0f} s for {what}: it hangs")
        await asyncio.sleep(0.02)


def growing_limits(first: float = 1.0) -> Iterator[float]:
    """Limits meant to fire, for a test that needs something to happen before the limit does: `first`, then 4 times longer.

    Such a limit races the start of what it limits (a sandbox, an interpreter); on a loaded machine the start
    can outlast a short limit. A test tries the next limit when the start lost the race; the last is under `HANG_S`.
    """
    limit = first
    while limit < HANG_S:
        yield limit
        limit *= 4


__all__ = ["HANG_S", "arrives", "growing_limits", "wait_until"]
