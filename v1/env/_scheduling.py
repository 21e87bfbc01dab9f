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
import itertools
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from v1.env._results import RolloutKey
from v1.errors import Error, TaskError
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


def is_stream(inputs: Iterable[Any]) -> bool:
    """Whether `generate`'s inputs are drawn one at a time (a generator, an iterator): not a list or a `Dataset`."""
    return not (isinstance(inputs, Sequence) or _indexable(inputs))


@dataclass
class StreamPlan:
    """The units of a `generate` call over a stream, made as the run draws its input rows.

    Only the example ids drawn so far are kept (for ordering kept outputs and counting), and the
    tasks of units handed out but not yet started. A row whose `example_id` repeats an earlier
    one's is the next occurrence: its id gets `-2`, `-3`, ... (rows of a stream form no groups).
    Units in `done` (saved by a resumed run) are skipped. An exception raised while drawing a row
    becomes a `TaskError` naming the row's position.
    """

    inputs: Iterable[Task | Mapping[str, Any]]
    to_task: Callable[[Any], Task]
    rollouts_per_example: int
    independent_scoring: bool
    done: set[Any] = field(default_factory=set)
    example_order: list[Any] = field(default_factory=list)
    _tasks: dict[int, Task] = field(default_factory=dict)
    _seen: dict[Any, int] = field(default_factory=dict)

    def units(self) -> Iterator[tuple[Any, Unit]]:
        """Each drawn row's units (a group, or one unit per rollout under independent scoring) not yet done."""
        for position, row in enumerate(_drawn(self.inputs)):
            task = self.to_task(self._distinct(_with_example_id(row, position), position))
            example_id = task.get("example_id")
            self.example_order.append(example_id)
            count = self.rollouts_per_example
            made: list[tuple[Any, Unit]]
            if self.independent_scoring:
                made = [((example_id, index), Unit(example_id, [index], position)) for index in range(count)]
            else:
                made = [(example_id, Unit(example_id, list(range(count)), position))]
            for uid, unit in made:
                if uid not in self.done:
                    self._tasks[id(unit)] = task
                    yield uid, unit

    def task(self, unit: Unit) -> Task:
        """The task of a unit handed out by `units` (released once taken)."""
        return self._tasks.pop(id(unit))

    def _distinct(self, row: Any, position: int) -> Any:
        example_id = row.get("example_id")
        occurrence = self._seen.get(example_id, 0) + 1
        self._seen[example_id] = occurrence
        if occurrence == 1:
            return row
        if isinstance(row, Task):
            raise TaskError(
                f"input row {position}: example_id {example_id!r} repeats an earlier row's; a stream's rows need distinct ids"
            )
        return {**row, "example_id": f"{example_id}-{occurrence}"}


def _drawn(inputs: Iterable[Any]) -> Iterator[Any]:
    """The inputs, with anything but a `v1.Error` raised while drawing one turned into a `TaskError`."""
    rows = iter(inputs)
    for position in itertools.count():
        try:
            row = next(rows)
        except StopIteration:
            return
        except Error:
            raise
        except Exception as exc:
            raise TaskError(f"input row {position}: drawing it raised {type(exc).__name__}: {exc}") from exc
        yield row


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


async def run_units(units: Iterable[Unit], limiter: RolloutLimiter, run_unit: RunUnit) -> None:
    """Run every unit, at most `limiter.limit` rollouts in flight; the first unit to raise stops the rest.

    The exception propagates after the units still running are cancelled and awaited. `units` is
    drawn one unit at a time, as slots free up; when drawing the next one raises, no more are
    drawn, the units running finish (their outputs are kept), and then the exception propagates.
    """
    pending: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []  # kept here: a failed job leaves `pending` when it ends
    draw_error: Exception | None = None
    drawn = iter(units)

    def settle(job: asyncio.Task[None]) -> None:
        pending.discard(job)
        if not job.cancelled() and job.exception() is not None:
            failures.append(job.exception())  # type: ignore[arg-type]

    try:
        for position in itertools.count():
            try:
                unit = next(drawn)
            except StopIteration:
                break
            except Exception as exc:
                draw_error = exc
                break
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
        if draw_error is not None:
            raise draw_error
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
    units: Iterable[tuple[Any, Unit]]
    """The units to run with their ids: a list, or drawn one at a time from a stream (`StreamPlan.units`)."""
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

        await run_units((unit for _, unit in job.units), limiter, run_unit)

    def describe(self) -> dict[str, Any]:
        return {"kind": "local"}

    async def run_group(
        self, env: Any, rows: Sequence[Any], client: Any, model: str, sampling_args: Mapping[str, Any] | None = None
    ) -> Sequence[Mapping[str, Any]]:
        return await env.run_group(rows, client, model, dict(sampling_args or {}))


__all__ = [
    "Executor",
    "LocalExecutor",
    "Plan",
    "RolloutLimiter",
    "RunUnit",
    "StreamPlan",
    "Unit",
    "UnitJob",
    "is_stream",
    "plan_units",
    "run_units",
]
