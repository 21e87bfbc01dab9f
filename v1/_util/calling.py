"""Calling user code from the event loop without blocking it, on thread pools the endpoint never waits on.

Sync user code runs in worker threads. Which pool depends on who waits for it:

- user code the interception endpoint itself awaits while answering a call (the `@stop`
  handlers it checks before each turn) runs on the *endpoint* pool;
- everything else (sync programs, tools, handlers, user simulators) runs on the *user* pool.

A sync program holds its thread while it waits for the endpoint, so the endpoint must never
need a thread from the pool programs use: with one shared pool, as many sync programs as it
has threads would block every worker and the endpoint would wait forever for one. Neither pool
is the event loop's default executor, which stays free for the loop's own blocking work (DNS
lookups of the upstream host). Pools grow on demand up to their size
(`V1_USER_CODE_THREADS`, default 512; `V1_ENDPOINT_THREADS`, default 64); past it, calls queue.

A pool is `ThreadPoolExecutor`'s policy (a thread started only when no idle one is waiting) without
its per-call machinery: no `concurrent.futures.Future` (a `Condition` made, locked and notified for
each call) and no Python-level semaphore: one C queue and one C lock. A trip to a thread and back costs
about 0.7x what it did through `ThreadPoolExecutor.submit` (`benchmarks/sync_calls.py`).
Its threads are daemons: at interpreter exit a call still running is not waited for (a
`ThreadPoolExecutor` waits without limit, so one stuck tool hung the exit); `v1 eval`'s stop waits for
them within its grace (`calls_running`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import itertools
import os
import queue
import threading
import types
from collections.abc import Callable
from typing import Any, Literal

Pool = Literal["user", "endpoint"]
POOL_SIZES: dict[Pool, tuple[str, int]] = {"user": ("V1_USER_CODE_THREADS", 512), "endpoint": ("V1_ENDPOINT_THREADS", 64)}

_current_pool: contextvars.ContextVar[Pool] = contextvars.ContextVar("v1_user_code_pool", default="user")
_pools: dict[Pool, WorkerPool] = {}
_pools_lock = threading.Lock()
_resized: dict[Pool, int] = {}
_running = [0]  # sync calls running in either pool's threads
_running_lock = threading.Lock()


def pool_size(pool: Pool) -> int:
    """The most threads `pool` runs at once (set by `resize_pool`, else its environment variable, else the default)."""
    if pool in _resized:
        return _resized[pool]
    variable, default = POOL_SIZES[pool]
    raw = os.environ.get(variable)
    return max(1, int(raw)) if raw and raw.strip().isdigit() else default


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class WorkerPool:
    """At most `size` daemon threads running the calls `submit` queues, started as calls find none idle."""

    __slots__ = ("_idle", "_jobs", "_lock", "_names", "_successor", "_threads", "size")

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        """Threads done with a call and not yet matched by a submit: as `ThreadPoolExecutor`'s idle semaphore,
        a thread free (or about to be) for the next call, so none is started for it."""
        self._threads = 0
        self._names = (f"{name}_{index}" for index in itertools.count())
        self._successor: WorkerPool | None = None
        """The pool that takes this one's calls once it is shut down (`resize_pool`)."""

    def submit(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], call: Callable[[], Any]) -> None:
        """Run `call` in a worker thread and post its answer to `future` on `loop` (unless `future` is
        cancelled before it starts); a thread is started when none is idle and fewer than `size` run.
        A pool shut down hands the call to its successor."""
        with self._lock:  # a call is queued before the shutdown's end mark or handed on, never after it
            successor = self._successor
            if successor is None:
                self._jobs.put((loop, future, call))
                if self._idle:
                    self._idle -= 1
                    return
                if self._threads >= self.size:
                    return  # every thread busy: the call waits its turn
                self._threads += 1
        if successor is not None:
            successor.submit(loop, future, call)
            return
        try:
            threading.Thread(target=self._work, name=next(self._names), daemon=True).start()
        except BaseException:  # no thread (interpreter exit, the system's limit): the caller hears why
            with self._lock:
                self._threads -= 1
            raise

    def _work(self) -> None:
        jobs, lock = self._jobs, self._lock
        while (job := jobs.get()) is not None:
            loop, future, call = job
            del job  # nothing of a call is kept alive while the thread waits for the next
            answer = _answer(future, call)
            with lock:  # free before the caller hears: its next call finds this thread idle
                self._idle += 1
            if answer is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits for the answer
                    loop.call_soon_threadsafe(_settle, future, *answer)
            del loop, future, call, answer
        jobs.put(None)  # the next thread stops too

    def shutdown(self, successor: WorkerPool) -> None:
        """Stop the threads once the calls queued before this have run (none is waited for here); later
        calls go to `successor`."""
        with self._lock:
            self._successor = successor
            self._jobs.put(None)


def executor(pool: Pool) -> WorkerPool:
    """The process-wide thread pool named `pool`, created on first use."""
    found = _pools.get(pool)
    if found is not None:
        return found
    with _pools_lock:
        if pool not in _pools:
            _pools[pool] = WorkerPool(pool_size(pool), f"v1-{pool}")
        return _pools[pool]


def resize_pool(pool: Pool, size: int) -> None:
    """Run at most `size` threads in `pool` from now on: calls already running finish on the old pool's threads.

    Raises:
        ValueError: a size below 1.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"thread pool size must be a positive integer, got {size!r}")
    with _pools_lock:
        if _resized.get(pool) == size and pool in _pools:
            return
        _resized[pool] = size
        old = _pools.pop(pool, None)
        new = _pools[pool] = WorkerPool(size, f"v1-{pool}")
    if old is not None:
        old.shutdown(new)


class endpoint_calls:
    """Within this block (the endpoint answering a call), sync user code runs on the endpoint pool.

    A class rather than a `contextmanager` generator: every admitted model call enters it.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _current_pool.set("endpoint")

    def __exit__(self, *exc_info: object) -> None:
        _current_pool.reset(self._token)


_NEVER_AWAITABLE = frozenset({str, int, float, bool, type(None), dict, list, tuple, bytes})
"""What sync user code mostly returns: types no `isawaitable` check (an ABC's) need look at."""


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions and objects whose `__call__` is one (partials included)."""
    if type(fn) is types.FunctionType:
        if fn.__code__.co_flags & inspect.CO_COROUTINE:
            return True  # an `async def` function, as most handlers and programs are: no unwrapping to do
        if not fn.__dict__:
            return False  # a plain `def`, as most tools and rewards are (no attribute: no coroutine mark either)
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn):
        return False  # a sync function or method, as most rewards and tools are: its type's `__call__` is not looked up
    return inspect.iscoroutinefunction(inspect.getattr_static(type(fn), "__call__", None))


def calls_running() -> int:
    """How many sync calls `run_in_pool` has running in worker threads now (a cancelled caller leaves its call running)."""
    return _running[0]


def _answer(future: asyncio.Future[Any], call: Callable[[], Any]) -> tuple[Any, BaseException | None] | None:
    """In a worker thread: `call`'s (result, error), counted in `calls_running` while it runs; None when its
    caller was cancelled while it queued (a stale read only lets a call start that a later cancel would have
    left running anyway)."""
    if future.cancelled():
        return None
    with _running_lock:
        _running[0] += 1
    try:
        return call(), None
    except BaseException as raised:  # handed to the caller, as `run_in_executor` hands it
        return None, raised
    finally:
        with _running_lock:
            _running[0] -= 1


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: hand a worker's answer to the caller, unless the caller has given up waiting."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    elif isinstance(error, StopIteration):  # a future refuses it, as a coroutine does
        future.set_exception(RuntimeError(f"sync user code raised StopIteration: {error!r}"))
    else:
        future.set_exception(error)


async def run_in_pool(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run sync `fn` on the current pool (see the module docs), with the caller's context variables.

    The worker posts its answer straight to an asyncio future (one wake-up of the loop), not through
    a `concurrent.futures.Future` chained to one as `run_in_executor` does. A caller cancelled while
    its call still queues leaves it unrun; one cancelled while it runs leaves it running (`calls_running`).
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    executor(_current_pool.get()).submit(loop, future, call)
    return await future


async def call_user_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await an async callable; run a sync one in a worker thread of its pool (so the endpoint keeps serving).

    A sync callable that returns an awaitable has it awaited too.
    """
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    result = await run_in_pool(fn, *args, **kwargs)
    if type(result) in _NEVER_AWAITABLE:
        return result
    return await result if inspect.isawaitable(result) else result


__all__ = [
    "Pool",
    "WorkerPool",
    "call_user_code",
    "calls_running",
    "endpoint_calls",
    "executor",
    "is_async_callable",
    "pool_size",
    "resize_pool",
    "run_in_pool",
]
