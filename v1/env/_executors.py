"""Executors: where the groups of `Env.generate` (and the trainer's rollout groups) run.

`LocalExecutor` (the default) runs them on the caller's event loop. `RayExecutor` runs them on
Ray actors, one or more per machine of a Ray cluster: each actor loads the environment again
from its `EnvSource` (the TOML file or module id the driver loaded, with the same overrides),
resolves its own clients, and runs groups on its own event loop with its own interception
endpoint. Finished groups come back to the driver, which stays the one writer of
`results.jsonl`/`metadata.json`, so progress, the summary and `--resume` are those of a local run.

An actor that dies has the groups it held re-run on the others (counted as `rerun_groups` in
the `executor` field of the metadata); the driver takes each group's outputs once. Ray is
imported only when a `RayExecutor` first runs (`pip install 'v1[distributed]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
import warnings
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from v1.config import ClientConfig
from v1.env._env import EnvOrigin
from v1.env._loading import EnvSource
from v1.env._scheduling import Executor, LocalExecutor, Unit, UnitJob
from v1.errors import ConfigError, Error
from v1.rollout import Task

TEARDOWN_TIMEOUT_S = 60.0
"""How long closing an executor waits for its actors' environment teardowns."""

logger = logging.getLogger(__name__)


class RayActorsLost(Error):
    """Raised when every actor of a `RayExecutor` died (the run can't go on; `--resume` finishes it)."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("the Ray executor needs Ray: pip install 'v1[distributed]'") from None
    return ray


def shippable_clients(client: Any) -> list[ClientConfig] | None:
    """The client configs a remote worker resolves for itself (None: the harness's own client).

    Raises:
        ConfigError: a live client that carries no `ClientConfig` (it can't be sent to another machine).
    """
    if client is None:
        return None
    configs = []
    for source in list(client) if isinstance(client, (list, tuple)) else [client]:
        config = source if isinstance(source, ClientConfig) else getattr(source, "config", None)
        if not isinstance(config, ClientConfig):
            raise ConfigError(
                f"RayExecutor: client {type(source).__name__} has no ClientConfig to send to the workers; pass client=ClientConfig(...)"
            )
        configs.append(config)
    return configs


class RolloutWorker:
    """A Ray actor's state: the environment loaded from its source, and its clients (resolved on the actor's loop)."""

    def __init__(self, source: EnvOrigin, clients: list[ClientConfig] | None) -> None:
        self.started = time.perf_counter()
        self.source = source
        self.client_sources = clients
        self.env: Any = None
        self.clients: list[Any] = []
        self._loading: asyncio.Task[dict[str, Any]] | None = None

    async def ready(self) -> dict[str, Any]:
        """Load the environment and resolve the clients, once; the node id and the seconds this took."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    async def _load(self) -> dict[str, Any]:
        ray = _import_ray()
        self.env = await asyncio.to_thread(self.source.load)
        self.clients = await self.env.resolve_clients(self.client_sources)
        return {"node": ray.get_runtime_context().get_node_id(), "startup_s": time.perf_counter() - self.started}

    async def run_unit(
        self,
        position: int,
        unit: Unit,
        task: Task,
        model: str,
        sampling_args: Mapping[str, Any],
        max_retries: int,
        state_columns: list[str],
    ) -> tuple[list[dict[str, Any]], list[tuple[list[Any], list[Any]]]]:
        """One unit's outputs, and the retries it made (`(keys, errors)` each, replayed on the driver)."""
        await self.ready()
        retries: list[tuple[list[Any], list[Any]]] = []
        outputs = await self.env.run_unit(
            unit,
            task,
            self.clients[position % len(self.clients)],
            model,
            dict(sampling_args),
            max_retries,
            state_columns,
            lambda keys, errors: retries.append((list(keys), list(errors))),
        )
        return [dict(output) for output in outputs], retries

    async def teardown(self) -> None:
        """The actor's environment is done (the executor is closing): its teardown, if it was loaded."""
        if self._loading is not None and self.env is not None:
            await self.env.teardown()

    async def run_group(
        self, position: int, rows: list[Any], model: str, sampling_args: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """`Env.run_group` with this actor's client `position` (round-robin over the endpoints); the states as dicts."""
        await self.ready()
        client = self.clients[position % len(self.clients)]
        states = await self.env.run_group(rows, client, model, dict(sampling_args))
        return [dict(state) for state in states]


class _Actor:
    def __init__(self, handle: Any, limit: int) -> None:
        self.handle = handle
        self.limit = limit
        self.in_flight = 0
        self.alive = True

    def has_room(self, size: int) -> bool:
        return self.alive and (self.in_flight == 0 or self.limit <= 0 or self.in_flight + size <= self.limit)


class RayExecutor:
    """Runs groups on Ray actors; the driver (this process) collects and writes their outputs.

    Actors start on first use and stay up for the next `generate`/`run_group` call with the
    same environment and clients; `close()` stops them (and Ray, if this executor started it).

    Args:
        address: a Ray cluster's address (``ray://host:10001`` or ``host:6379``, or ``auto``);
            None starts a local Ray instance in this process.
        actors: how many actors (spread over the cluster's nodes).
        actor_concurrency: the most rollouts in flight per actor; None divides `generate`'s
            `max_concurrent` among the actors (unbounded when it is).
        num_cpus: the CPUs Ray reserves per actor (fractions allowed).
        source: the environment the actors load; the env's own `source` (set by
            `load_environment`) when None.
        actor_options: more `ray.remote` options for the actors (e.g. ``resources``, ``runtime_env``).
        init_options: more `ray.init` options, when this executor starts or joins Ray.
        startup_timeout: seconds the actors may take to start (placement included: an actor
            waits while the cluster lacks the CPUs it reserves).

    Raises:
        ConfigError: `actors` below 1 or `actor_concurrency` below 1.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        actors: int = 2,
        actor_concurrency: int | None = None,
        num_cpus: float = 1.0,
        source: EnvSource | None = None,
        actor_options: Mapping[str, Any] | None = None,
        init_options: Mapping[str, Any] | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        if actors < 1:
            raise ConfigError(f"RayExecutor: actors must be at least 1, got {actors}")
        if actor_concurrency is not None and actor_concurrency < 1:
            raise ConfigError(f"RayExecutor: actor_concurrency must be at least 1, got {actor_concurrency}")
        self.address = address
        self.actors = actors
        self.actor_concurrency = actor_concurrency
        self.num_cpus = num_cpus
        self.source = source
        self.actor_options = dict(actor_options or {})
        self.init_options = dict(init_options or {})
        self.startup_timeout = startup_timeout
        self.started_ray = False
        self.pool: list[_Actor] = []
        self._pool_key: Any = None
        self._next_group = 0
        self._start_lock: tuple[Any, asyncio.Lock] | None = None
        self.stats: dict[str, Any] = {
            "kind": "ray",
            "address": address or "local",
            "actors": actors,
            "nodes": 0,
            "actors_lost": 0,
            "rerun_groups": 0,
            "actor_startup_s": [],
        }

    def describe(self) -> dict[str, Any]:
        """Where the last run ran (`address`, `actors`, `nodes`, `actor_startup_s`) and what it lost (`actors_lost`, `rerun_groups`)."""
        return {**self.stats, "actor_startup_s": [round(s, 3) for s in self.stats["actor_startup_s"]]}

    # -- the actor pool ---------------------------------------------------------------------

    def connect(self) -> None:
        """Join the cluster at `address` (or start a local Ray instance) unless Ray is up in this process already.

        Blocks for seconds; `generate` calls it on a thread when it was not called first.

        Raises:
            ConfigError: nothing answers at `address` (checked with one TCP connect, since Ray
                itself retries for minutes).
        """
        ray = _import_ray()
        if self.address is not None and self.address != "auto":
            check_ray_address(self.address)
        if ray.is_initialized():
            return
        options: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False, "logging_level": "WARNING"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Ray's tip about accelerator variables
            ray.init(address=self.address or "local", **{**options, **self.init_options})
        self.started_ray = True

    async def _start(self, env: Any, client: Any, limit: int) -> list[_Actor]:
        loop = asyncio.get_running_loop()
        if self._start_lock is None or self._start_lock[0] is not loop:
            self._start_lock = (loop, asyncio.Lock())
        async with self._start_lock[1]:
            return await self._start_locked(env, client, limit)

    async def _start_locked(self, env: Any, client: Any, limit: int) -> list[_Actor]:
        source = self.source or env.source
        if source is None:
            raise ConfigError(
                "RayExecutor: the environment was built in Python, so the actors can't load it; load it with "
                "v1.load_environment(...) or pass RayExecutor(source=EnvSource(...))"
            )
        clients = shippable_clients(client)
        key = (source, None if clients is None else [c.model_dump_json() for c in clients])
        if self.pool and self._pool_key == key and any(actor.alive for actor in self.pool):
            for actor in self.pool:
                actor.limit = limit
            return self.pool
        self.close_actors()
        ray = _import_ray()
        if not ray.is_initialized():
            await asyncio.to_thread(self.connect)
        worker = ray.remote(RolloutWorker)
        options = {"num_cpus": self.num_cpus, "scheduling_strategy": "SPREAD", "max_concurrency": 10_000, **self.actor_options}
        handles = [worker.options(**options).remote(source, clients) for _ in range(self.actors)]
        self.pool = [_Actor(handle, limit) for handle in handles]
        self._pool_key = key
        try:
            ready = await asyncio.wait_for(asyncio.gather(*(handle.ready.remote() for handle in handles)), self.startup_timeout)
        except asyncio.TimeoutError:
            self.close_actors()
            raise RayActorsLost(
                f"RayExecutor: {self.actors} actor(s) did not start within {self.startup_timeout:g} s; each reserves "
                f"num_cpus={self.num_cpus:g}: `ray status` shows what the cluster has free"
            ) from None
        except BaseException as exc:
            self.close_actors()
            raise _unwrap(ray, exc) from None
        self.stats["nodes"] = len({info["node"] for info in ready})
        self.stats["actor_startup_s"] = [info["startup_s"] for info in ready]
        return self.pool

    def _pick(self, size: int) -> _Actor | None:
        free = [actor for actor in self.pool if actor.has_room(size)]
        return min(free, key=lambda actor: actor.in_flight) if free else None

    def _lost(self, actor: _Actor) -> None:
        if actor.alive:
            actor.alive = False
            self.stats["actors_lost"] += 1
        if not any(other.alive for other in self.pool):
            raise RayActorsLost(f"RayExecutor: all {len(self.pool)} Ray actors died; see the Ray logs (ray logs cluster) for why")

    def close_actors(self) -> None:
        """Tear down the live actors' environments (at most `TEARDOWN_TIMEOUT_S`), then stop the actors (Ray stays up)."""
        if self.pool:
            ray = _import_ray()
            pending = [actor.handle.teardown.remote() for actor in self.pool if actor.alive]
            try:
                ray.get(pending, timeout=TEARDOWN_TIMEOUT_S)
            except Exception as exc:  # a dead actor or a teardown that hangs must not keep the executor open
                logger.warning("RayExecutor: tearing down the actors' environments failed: %s", _unwrap(ray, exc))
            for actor in self.pool:
                ray.kill(actor.handle)
        self.pool = []
        self._pool_key = None

    def close(self) -> None:
        """Stop the actors, and Ray if this executor started it."""
        self.close_actors()
        if self.started_ray:
            _import_ray().shutdown()
            self.started_ray = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- generate ---------------------------------------------------------------------------

    async def run(self, job: UnitJob) -> None:
        """Run `job`'s units on the actors; each unit's outputs go to `job.finished` once, in the order they finish."""
        per_actor = self.actor_concurrency or (math.ceil(job.max_concurrent / self.actors) if job.max_concurrent > 0 else 0)
        self.stats["rerun_groups"] = self.stats["actors_lost"] = 0  # counted per run
        units = list(job.units)  # a stream's units are drawn here, all at once: Ray re-queues any unit whose actor died
        if not units:
            return
        await self._start(job.env, job.client_sources, per_actor)
        ray = _import_ray()
        queue: deque[tuple[int, Any, Unit]] = deque((position, uid, unit) for position, (uid, unit) in enumerate(units))
        delivered: set[Any] = set()
        in_flight: dict[asyncio.Future[Any], tuple[_Actor, tuple[int, Any, Unit], Any]] = {}
        args = (job.model, dict(job.sampling_args), job.max_retries, list(job.state_columns))
        try:
            while len(delivered) < len(units):
                while queue and (actor := self._pick(len(queue[0][2].indices))) is not None:
                    item = queue.popleft()
                    actor.in_flight += len(item[2].indices)
                    ref = actor.handle.run_unit.remote(item[0], item[2], job.task_of(item[2]), *args)
                    in_flight[asyncio.ensure_future(ref)] = (actor, item, ref)
                finished, _ = await asyncio.wait(list(in_flight), return_when=asyncio.FIRST_COMPLETED)
                for call in finished:
                    actor, item, _ = in_flight.pop(call)
                    actor.in_flight -= len(item[2].indices)
                    error = call.exception()
                    if isinstance(error, ray.exceptions.RayActorError):
                        queue.appendleft(item)
                        self.stats["rerun_groups"] += 1
                        self._lost(actor)
                        continue
                    if error is not None:
                        raise _unwrap(ray, error)
                    if item[1] in delivered:
                        continue
                    delivered.add(item[1])
                    outputs, retries = call.result()
                    if job.on_retry is not None:
                        for keys, errors in retries:
                            job.on_retry([tuple(key) for key in keys], errors)
                    await job.finished(outputs)
        finally:
            for call, (actor, _, ref) in in_flight.items():  # stopped early: the actors drop those groups too
                call.cancel()
                actor.in_flight = 0
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
            await asyncio.gather(*in_flight, return_exceptions=True)

    # -- training ---------------------------------------------------------------------------

    async def run_group(
        self, env: Any, rows: Sequence[Any], client: Any, model: str, sampling_args: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """`env.run_group` on an actor (the least loaded); groups take the endpoints round-robin.

        A group whose actor dies is run again on another. Returns the finalized states as dicts.
        """
        self._next_group += 1
        position = self._next_group
        while True:
            await self._start(env, client, 0)
            ray = _import_ray()
            actor = self._pick(len(rows))
            assert actor is not None  # no limit per actor here
            actor.in_flight += len(rows)
            try:
                return await actor.handle.run_group.remote(position, list(rows), model, dict(sampling_args or {}))
            except ray.exceptions.RayActorError:
                self.stats["rerun_groups"] += 1
                self._lost(actor)
            except ray.exceptions.RayTaskError as exc:
                raise _unwrap(ray, exc) from None
            finally:
                actor.in_flight -= len(rows)


def check_ray_address(address: str) -> None:
    """Refuse a Ray address nothing answers at, with one TCP connect (Ray itself retries for minutes); ``auto`` passes.

    Raises:
        ConfigError: not ``HOST:PORT`` / ``ray://HOST:PORT``, or nothing listens there.
    """
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"Ray address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(
            f"Ray address {address}: nothing answers there ({exc.strerror or exc}); start a cluster with `ray start --head`"
        ) from None


def _unwrap(ray: Any, error: BaseException) -> BaseException:
    """The exception a unit raised on its actor (Ray wraps it), so the driver sees a v1 error as it is."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.as_instanceof_cause()
        original = getattr(error, "cause", None)
        return original if isinstance(original, BaseException) else cause
    return error


__all__ = [
    "check_ray_address",
    "Executor",
    "LocalExecutor",
    "RayActorsLost",
    "RayExecutor",
    "RolloutWorker",
    "UnitJob",
    "shippable_clients",
]
