"""How `Env.generate` plans and schedules its work: units of rollouts, and at most N in flight.

A *unit* is what is scored together: one example's group of rollouts, or one rollout under
independent scoring. `plan_units` groups the inputs into units; `run_units` runs them with a
`RolloutLimiter` bounding the rollouts in flight across units, and stops at the first unit
that raises (cancelling the others).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from v1.results import RolloutKey
from v1.task import Task


class RolloutLimiter:
    """A weighted semaphore: a group of n rollouts takes n slots (capped at the limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit if limit > 0 else sys.maxsize
        self.in_flight = 0
        self._changed = asyncio.Condition()

    async def acquire(self, n: int) -> int:
        n = min(n, self.limit)
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight + n <= self.limit)
            self.in_flight += n
        return n

    async def release(self, n: int) -> None:
        async with self._changed:
            self.in_flight -= n
            self._changed.notify_all()


@dataclass
class Unit:
    """What is scored together: one example's group, or one rollout under independent scoring."""

    task: Task
    indices: list[int]

    def keys(self) -> list[RolloutKey]:
        return [(self.task.get("example_id"), index) for index in self.indices]


@dataclass
class Plan:
    """The units of a `generate` call, keyed by unit id, and the example ids in input order."""

    units: dict[Any, Unit]
    example_order: list[Any]

    def keys(self) -> dict[Any, list[RolloutKey]]:
        return {uid: unit.keys() for uid, unit in self.units.items()}


def plan_units(
    tasks: Iterable[Task | Mapping[str, Any]],
    to_task: Callable[[Any], Task],
    rollouts_per_example: int,
    independent_scoring: bool,
) -> Plan:
    """Group inputs into units; rows without an `example_id` get their position as one.

    Inputs sharing an `example_id` form one group (so `[row] * 4` is a group of four).
    """
    groups: dict[Any, tuple[Task, int]] = {}
    for position, row in enumerate(tasks):
        if not isinstance(row, Task) and isinstance(row, Mapping) and "example_id" not in row:
            row = {**row, "example_id": position}
        task = to_task(row)
        first, count = groups.get(task.get("example_id"), (task, 0))
        groups[task.get("example_id")] = (first, count + rollouts_per_example)
    units: dict[Any, Unit] = {}
    for example_id, (task, count) in groups.items():
        if independent_scoring:
            units.update({(example_id, index): Unit(task, [index]) for index in range(count)})
        else:
            units[example_id] = Unit(task, list(range(count)))
    return Plan(units, list(groups))


RunUnit = Callable[[Unit, int, int], Coroutine[Any, Any, None]]
"""Runs one unit: `(unit, its position, the limiter slots it holds)`; it releases the slots."""


async def run_units(units: list[Unit], limiter: RolloutLimiter, run_unit: RunUnit) -> None:
    """Run every unit, at most `limiter.limit` rollouts in flight; the first unit to raise stops the rest.

    The exception propagates after the units still running are cancelled and awaited.
    """
    pending: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []  # kept here: a failed job leaves `pending` when it ends

    def settle(job: asyncio.Task[None]) -> None:
        pending.discard(job)
        if not job.cancelled() and job.exception() is not None:
            failures.append(job.exception())  # type: ignore[arg-type]

    try:
        for position, unit in enumerate(units):
            slots = await limiter.acquire(len(unit.indices))
            if failures:
                await limiter.release(slots)
                raise failures[0]
            job = asyncio.create_task(run_unit(unit, position, slots))
            pending.add(job)
            job.add_done_callback(settle)
        while pending and not failures:
            await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0)  # let the done callbacks of the last jobs run
        if failures:
            raise failures[0]
    except BaseException:
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        raise


__all__ = ["Plan", "RolloutLimiter", "RunUnit", "Unit", "plan_units", "run_units"]
