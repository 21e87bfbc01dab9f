"""How `Env.generate` plans and schedules its work: units of rollouts, and at most N in flight.

A *unit* is what is scored together: one example's group of rollouts, or one rollout under
independent scoring. `plan_units` groups the inputs into units; `run_units` runs them with a
`RolloutLimiter` bounding the rollouts in flight across units, and stops at the first unit
that raises (cancelling the others).

An `Executor` is where the units of a `generate` call run, given as a `UnitJob`: the
`LocalExecutor` (the default) runs them on this event loop with `run_units`; other
executors (`v1.env.RayExecutor`) run them elsewhere and hand each finished unit's
outputs to `UnitJob.finished`, which stays the one writer of results.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from v1.env._results import RolloutKey
from v1.rollout import Task


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


@dataclass(slots=True)
class Unit:
    """What is scored together: one example's group, or one rollout under independent scoring.

    The unit holds the example's id and the position of its first input row, not its `Task`:
    `Plan.task` builds the task when the unit is scheduled, so a plan of 100k rows holds ids,
    not 100k tasks.
    """

    example_id: Any
    indices: list[int]
    source: int

    def keys(self) -> list[RolloutKey]:
        return [(self.example_id, index) for index in self.indices]


@dataclass
class Plan:
    """The units of a `generate` call, keyed by unit id, the example ids in input order, and how to get a unit's task."""

    units: dict[Any, Unit]
    example_order: list[Any]
    task_at: Callable[[int], Task]
    """The task of the input row at a position (validated once already, when the plan was made)."""

    def keys(self) -> dict[Any, list[RolloutKey]]:
        return {uid: unit.keys() for uid, unit in self.units.items()}

    def task(self, unit: Unit) -> Task:
        """The unit's task, built from its input row now."""
        return self.task_at(unit.source)


def plan_units(
    tasks: Iterable[Task | Mapping[str, Any]],
    to_task: Callable[[Any], Task],
    rollouts_per_example: int,
    independent_scoring: bool,
) -> Plan:
    """Group inputs into units; rows without an `example_id` get their position as one.

    Inputs sharing an `example_id` form one group (so `[row] * 4` is a group of four). Every
    row is turned into a task here, so a bad row fails the call before anything runs; inputs
    that can be indexed (a list, a `datasets.Dataset`) are read again when a unit is
    scheduled instead of keeping every task for the whole run, others are kept as tasks.
    """
    rows: Any = tasks if isinstance(tasks, Sequence) or _indexable(tasks) else None
    kept: list[Task] = []

    def task_at(position: int) -> Task:
        return to_task(_with_example_id(rows[position], position))

    groups: dict[Any, tuple[int, int]] = {}
    for position, row in enumerate(tasks):
        task = to_task(_with_example_id(row, position))
        if rows is None:
            kept.append(task)
        first, count = groups.get(task.get("example_id"), (position, 0))
        groups[task.get("example_id")] = (first, count + rollouts_per_example)
    units: dict[Any, Unit] = {}
    for example_id, (first, count) in groups.items():
        if independent_scoring:
            units.update({(example_id, index): Unit(example_id, [index], first) for index in range(count)})
        else:
            units[example_id] = Unit(example_id, list(range(count)), first)
    return Plan(units, list(groups), task_at if rows is not None else kept.__getitem__)


def _with_example_id(row: Any, position: int) -> Any:
    """A row without an `example_id` gets its position as one (tasks and rows that have one pass as they are)."""
    if not isinstance(row, Task) and isinstance(row, Mapping) and "example_id" not in row:
        return {**row, "example_id": position}
    return row


def _indexable(inputs: Any) -> bool:
    """A `datasets.Dataset` (or the like): rows by position and a length, without being a `Sequence`."""
    return hasattr(inputs, "__getitem__") and hasattr(inputs, "__len__") and not isinstance(inputs, (str, bytes, Mapping))


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


@dataclass
class UnitJob:
    """What an executor needs to run the units of one `generate` call.

    `env` runs a unit with `env.run_unit(...)`; `clients` are the resolved clients (used
    round-robin by unit position) and `client_sources` what they were resolved from (the
    `client` argument of `generate`: what a remote executor ships to its workers).
    `finished` takes each unit's outputs exactly once; `on_retry` is the caller's retry callback.
    """

    env: Any
    units: list[tuple[Any, Unit]]
    task_of: Callable[[Unit], Task]
    """A unit's task, built when the unit is handed out (`Plan.task`)."""
    clients: list[Any]
    client_sources: Any
    model: str
    sampling_args: Mapping[str, Any]
    max_retries: int
    state_columns: list[str]
    max_concurrent: int
    finished: Callable[[list[Any]], Awaitable[None]]
    on_retry: Callable[[list[RolloutKey], list[Mapping[str, Any]]], None] | None = None


class Executor(Protocol):
    """Where the units of a `generate` call run."""

    async def run(self, job: UnitJob) -> None:
        """Run every unit of `job`, passing each unit's outputs to `job.finished` once; the first error stops the run."""
        ...

    def describe(self) -> dict[str, Any]:
        """What ran the units (recorded as `executor` in the run's metadata)."""
        ...

    async def run_group(
        self, env: Any, rows: Sequence[Any], client: Any, model: str, sampling_args: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]:
        """One scored group, as `Env.run_group` returns it (the trainer's rollouts)."""
        ...


class LocalExecutor:
    """Runs the units on the current event loop, at most `job.max_concurrent` rollouts in flight (the default executor)."""

    async def run(self, job: UnitJob) -> None:
        limiter = RolloutLimiter(job.max_concurrent)

        async def run_unit(unit: Unit, position: int, slots: int) -> None:
            try:
                outputs = await job.env.run_unit(
                    unit,
                    job.task_of(unit),
                    job.clients[position % len(job.clients)],
                    job.model,
                    job.sampling_args,
                    job.max_retries,
                    job.state_columns,
                    job.on_retry,
                )
            finally:
                await limiter.release(slots)
            await job.finished(outputs)

        await run_units([unit for _, unit in job.units], limiter, run_unit)

    def describe(self) -> dict[str, Any]:
        return {"kind": "local"}

    async def run_group(
        self, env: Any, rows: Sequence[Any], client: Any, model: str, sampling_args: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]:
        return await env.run_group(rows, client, model, dict(sampling_args or {}))


__all__ = ["Executor", "LocalExecutor", "Plan", "RolloutLimiter", "RunUnit", "Unit", "UnitJob", "plan_units", "run_units"]
