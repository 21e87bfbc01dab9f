"""The async off-policy orchestrator: rollout groups generated ahead of the trainer, with bounded staleness.

Rollouts come from the same `Env` objects eval uses, through its public worker
interface only (`ENV_INTERFACE`): `get_dataset` for the data (or `row_stream`, when the
training rows are a stream), `run_group` for a scored group of `rollouts_per_example`
rollouts of one example.

Generation runs ahead of training: while step n trains, groups for steps n+1..n+k
are generated with the weights the server has (k = `max_staleness`). Each group
remembers the policy version that generated it; a group older than k steps when its
step comes is dropped and counted. Groups whose rewards are all equal carry no
gradient (every advantage is 0): they are filtered and counted, never silently
kept or hidden. Groups with a rollout that errored are filtered and counted too.
With `max_groups_per_step`, a step whose collection has seen that many groups finish
trains on the accepted groups it has, so filtering can't stall it.

Groups run where `executor` puts them: on this event loop by default, or on Ray actors
across machines (`v1.env.RayExecutor`), each group taking the next endpoint of the
client's `endpoint_configs` round-robin.

The data order is deterministic: epoch e visits the rows in the order
`random.Random(seed + e)` shuffles them into; `checkpoint_state` records the next
position and the positions started but not yet trained on, so a resumed run
starts exactly those again, then continues where the order left off. A stream's rows are
drawn in the stream's own order as groups start (shuffle it with `Taskset.shuffle(seed,
buffer=...)`), nothing else of it is held, and a finite stream is drawn again when it ends;
a resumed run draws the positions before its cursor again and keeps only the pending ones.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from v1.env import Executor, LocalExecutor
from v1.errors import Error
from v1.taskset import RowSource
from v1.train._config import RolloutsConfig

ENV_INTERFACE = ("env_id", "get_dataset", "row_stream", "run_group", "evaluate")
"""The whole of `Env` that training uses: its public worker interface (a test pins it)."""


class ZeroVarianceError(Error):
    """Raised when so many groups in a row had no reward variance that training can't proceed."""


class RolloutsFailedError(Error):
    """Raised when so many groups in a row had a rollout that errored that training can't proceed."""


@dataclass
class RolloutGroup:
    """One example's scored rollouts and the policy version that generated them."""

    position: int
    example_id: Any
    states: list[Any]
    policy_version: int

    @property
    def rewards(self) -> list[float]:
        return [float(state.get("reward") or 0.0) for state in self.states]


@dataclass
class StepCounts:
    """What happened to the groups that finished while one step's batch was collected."""

    finished_groups: int = 0
    dropped_stale: int = 0
    filtered_zero_variance: int = 0
    filtered_errors: int = 0
    rewards: list[float] = field(default_factory=list)
    completion_tokens: int = 0


@dataclass
class StepBatch:
    """The groups one optimizer step trains on, their staleness, and the step's counts."""

    step: int
    groups: list[RolloutGroup]
    staleness: list[int]
    counts: StepCounts


class StreamOrder:
    """A stream's rows by position in the order they are drawn, drawn only as far as the positions asked for.

    Positions are asked for in increasing order, except `pending` ones (before the cursor of a resumed
    run), which are held when drawn past and handed out once.
    """

    def __init__(self, source: RowSource, pending: Sequence[int] = ()) -> None:
        self.source = source
        self.wanted = set(pending)
        self.held: dict[int, dict[str, Any]] = {}
        self.next_position = 0
        self._rows: Iterator[dict[str, Any]] | None = None
        self._drawn_this_pass = 0

    def row_at(self, position: int) -> dict[str, Any]:
        if position in self.held:
            return self.held.pop(position)
        while True:
            row = self._next()
            drawn, self.next_position = self.next_position, self.next_position + 1
            if drawn == position:
                self.wanted.discard(position)
                return row
            if drawn in self.wanted:
                self.held[drawn] = row

    def _next(self) -> dict[str, Any]:
        for _ in range(2):
            if self._rows is None:
                self._rows, self._drawn_this_pass = self.source.draw(), 0
            row = next(self._rows, None)
            if row is not None:
                self._drawn_this_pass += 1
                return dict(row)
            if self._drawn_this_pass == 0:
                break
            self._rows = None  # a finite stream ended: the next epoch draws it again
        raise Error(f"the training rows ({self.source.field}) are an empty stream")


def completion_tokens(state: Mapping[str, Any]) -> int:
    """Tokens the model generated in a rollout (from the recorded token ids, else the usage)."""
    total = 0
    for step in state.get("trajectory") or []:
        tokens = step.get("tokens")
        if tokens:
            total += len(tokens.get("completion_ids") or [])
        else:
            total += int(((step.get("response") or {}).get("usage") or {}).get("completion_tokens") or 0)
    return total


class Orchestrator:
    """Generates rollout groups ahead of the trainer and hands out one step's batch at a time.

    Args:
        env: an `Env` (or `EnvGroup`); only `ENV_INTERFACE` is used.
        client, model: what `run_group` calls (a `ClientConfig` or v1 `Client`, and the model name).
        config: group sizes, staleness, concurrency, sampling args, filtering, data seed.
        start_step: the step the next batch is for (a resumed run's step count).
        cursor: the next position in the data order (from `checkpoint_state`).
        pending: positions started before a checkpoint and not trained on: started first.
        executor: where groups run (`LocalExecutor` by default; `RayExecutor` for Ray actors).
    """

    def __init__(
        self,
        env: Any,
        client: Any,
        model: str,
        config: RolloutsConfig,
        *,
        start_step: int = 0,
        cursor: int = 0,
        pending: Sequence[int] = (),
        executor: Executor | None = None,
    ) -> None:
        self.env = env
        self.executor: Executor = executor if executor is not None else LocalExecutor()
        self.client = client
        self.model = model
        self.config = config
        stream = env.row_stream("train")
        self.stream = StreamOrder(stream, pending) if stream is not None else None
        self.rows: list[dict[str, Any]] = list(env.get_dataset()) if stream is None else []
        if stream is None and not self.rows:
            raise Error(f"environment {env.env_id}: the training dataset is empty")
        self.version = start_step
        self.consumed_steps = start_step
        self.cursor = cursor
        self._replay: deque[int] = deque(pending)
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._ready: deque[RolloutGroup] = deque()
        self._counts = StepCounts()
        self._changed = asyncio.Condition()
        self._failure: BaseException | None = None
        self._producer: asyncio.Task[None] | None = None
        self._zero_variance_in_a_row = 0
        self._errored_in_a_row = 0
        self._taking = 0
        self.started_positions: list[int] = []

    # -- data order -------------------------------------------------------------------------

    def row_at(self, position: int) -> dict[str, Any]:
        """The row at `position` of the data order."""
        if self.stream is not None:
            return self.stream.row_at(position)
        epoch, offset = divmod(position, len(self.rows))
        order = list(range(len(self.rows)))
        random.Random(self.config.seed + epoch).shuffle(order)
        return self.rows[order[offset]]

    def checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs: the next position, and positions started but not trained on."""
        waiting = sorted({group.position for group in self._ready} | set(self._in_flight) | set(self._replay))
        return {"cursor": self.cursor, "pending": waiting}

    # -- running ----------------------------------------------------------------------------

    async def __aenter__(self) -> Orchestrator:
        self._producer = asyncio.create_task(self._produce())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, drain_timeout: float = 30.0) -> None:
        """Stop generating, let the groups in flight finish (up to `drain_timeout` seconds), cancel the rest."""
        if self._producer is not None:
            self._producer.cancel()
            await asyncio.gather(self._producer, return_exceptions=True)
            self._producer = None
        in_flight = list(self._in_flight.values())
        if in_flight:
            await asyncio.wait(in_flight, timeout=drain_timeout)
        for task in in_flight:
            task.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)

    async def set_version(self, version: int) -> None:
        """The server now serves the weights after `version` optimizer steps."""
        async with self._changed:
            self.version = version
            self._changed.notify_all()

    def _may_start(self) -> bool:
        per_step = self.config.examples_per_step
        # groups already taken for the step being collected still count against its share
        groups_ahead = (len(self._ready) + len(self._in_flight) + self._taking) // per_step
        within_staleness = self.consumed_steps + groups_ahead - self.version <= self.config.max_staleness
        rollouts_in_flight = len(self._in_flight) * self.config.rollouts_per_example
        return within_staleness and (not self._in_flight or rollouts_in_flight < self.config.max_concurrent)

    async def _produce(self) -> None:
        try:
            while True:
                async with self._changed:
                    await self._changed.wait_for(self._may_start)
                    if self._replay:
                        position = self._replay.popleft()
                    else:
                        position, self.cursor = self.cursor, self.cursor + 1
                    self.started_positions.append(position)
                    self._in_flight[position] = asyncio.create_task(self._run_group(position, self.version))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced to the consumer by next_batch
            await self._fail(exc)

    async def _fail(self, exc: BaseException) -> None:
        async with self._changed:
            self._failure = exc
            self._changed.notify_all()

    async def _run_group(self, position: int, version: int) -> None:
        row = self.row_at(position)
        try:
            states = await self.executor.run_group(
                self.env, [row] * self.config.rollouts_per_example, self.client, self.model, dict(self.config.sampling_args)
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await self._fail(exc)
            return
        group = RolloutGroup(position, row.get("example_id"), list(states), version)
        async with self._changed:
            self._in_flight.pop(position, None)
            counts = self._counts
            counts.finished_groups += 1
            errors = [state["error"] for state in group.states if state.get("error")]
            if errors:
                counts.filtered_errors += 1
                self._count_errored_group(errors[-1])
            else:
                self._errored_in_a_row = 0
                rewards = group.rewards
                counts.rewards.extend(rewards)
                counts.completion_tokens += sum(completion_tokens(state) for state in group.states)
                if self.config.filter_zero_variance and max(rewards) == min(rewards):
                    counts.filtered_zero_variance += 1
                    self._zero_variance_in_a_row += 1
                    limit = self.config.max_zero_variance_in_a_row
                    if limit and self._zero_variance_in_a_row >= limit and self._failure is None:
                        self._failure = ZeroVarianceError(
                            f"{self._zero_variance_in_a_row} groups in a row had no reward variance (all rewards equal; "
                            f"rollouts.max_zero_variance_in_a_row = {limit}): nothing to learn from; raise rollouts_per_example "
                            "or the sampling temperature, use a harder or easier taskset, or raise the limit (0: never stop)"
                        )
                else:
                    self._zero_variance_in_a_row = 0
                    self._ready.append(group)
            self._changed.notify_all()

    def _count_errored_group(self, error: Any) -> None:
        self._errored_in_a_row += 1
        limit = self.config.max_errored_in_a_row
        if not limit or self._errored_in_a_row < limit or self._failure is not None:
            return
        described = f"{error.get('type', 'Error')}: {error.get('message', '')}" if isinstance(error, dict) else str(error)
        described = " ".join(described.split())[:500]
        self._failure = RolloutsFailedError(
            f"{self._errored_in_a_row} groups in a row had a rollout that errored (rollouts.max_errored_in_a_row = {limit}); "
            f"the last: {described} (fix the cause, or raise the limit; 0: never stop)"
        )

    def _collection_capped(self, taken: int) -> bool:
        cap = self.config.max_groups_per_step
        return taken > 0 and cap is not None and self._counts.finished_groups >= cap

    async def next_batch(self) -> StepBatch:
        """The next step's groups: `examples_per_step` accepted groups no staler than `max_staleness`
        (fewer, at least one, once `max_groups_per_step` groups finished during the collection).

        Raises:
            Whatever a group's `run_group` raised (the run can't go on), or `ZeroVarianceError`.
        """
        step = self.consumed_steps
        taken: list[RolloutGroup] = []
        async with self._changed:
            while len(taken) < self.config.examples_per_step:
                await self._changed.wait_for(
                    lambda: bool(self._ready) or self._failure is not None or self._collection_capped(len(taken))
                )
                if self._failure is not None:
                    raise self._failure
                if not self._ready:
                    break
                group = self._ready.popleft()
                if step - group.policy_version > self.config.max_staleness:
                    self._counts.dropped_stale += 1
                    continue
                taken.append(group)
                self._taking = len(taken)
            self._taking = 0
            counts, self._counts = self._counts, StepCounts()
            self.consumed_steps += 1
            self._changed.notify_all()
        return StepBatch(step, taken, [step - group.policy_version for group in taken], counts)


__all__ = ["ENV_INTERFACE", "Orchestrator", "RolloutGroup", "StepBatch", "StepCounts", "ZeroVarianceError", "completion_tokens"]
