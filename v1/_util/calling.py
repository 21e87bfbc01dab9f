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
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import threading
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

Pool = Literal["user", "endpoint"]
POOL_SIZES: dict[Pool, tuple[str, int]] = {"user": ("V1_USER_CODE_THREADS", 512), "endpoint": ("V1_ENDPOINT_THREADS", 64)}

_current_pool: contextvars.ContextVar[Pool] = contextvars.ContextVar("v1_user_code_pool", default="user")
_pools: dict[Pool, ThreadPoolExecutor] = {}
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


def executor(pool: Pool) -> ThreadPoolExecutor:
    """The process-wide thread pool named `pool`, created on first use."""
    found = _pools.get(pool)
    if found is not None:
        return found
    with _pools_lock:
        if pool not in _pools:
            _pools[pool] = ThreadPoolExecutor(max_workers=pool_size(pool), thread_name_prefix=f"v1-{pool}")
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
        _pools[pool] = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"v1-{pool}")
    if old is not None:
        old.shutdown(wait=False)


class endpoint_calls:
    """Within this block (the endpoint answering a call), sync user code runs on the endpoint pool.

    A class rather than a `contextmanager` generator: every admitted model call enters it.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _current_pool.set("endpoint")

    def __exit__(self, *exc_info: object) -> None:
        _current_pool.reset(self._token)


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions and objects whose `__call__` is one (partials included)."""
    if type(fn) is types.FunctionType and fn.__code__.co_flags & inspect.CO_COROUTINE:
        return True  # an `async def` function, as most handlers and programs are: no unwrapping to do
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


def _counted(call: Callable[[], Any]) -> Any:
    with _running_lock:
        _running[0] += 1
    try:
        return call()
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


def _run_for(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], call: Callable[[], Any]) -> None:
    """In a worker thread: run `call` unless its caller was cancelled while it queued, and post the answer back."""
    if future.cancelled():  # a stale read only lets a call start that a later cancel would have left running anyway
        return
    try:
        result, error = _counted(call), None
    except BaseException as raised:  # handed to the caller, as `run_in_executor` hands it
        result, error = None, raised
    loop.call_soon_threadsafe(_settle, future, result, error)


async def run_in_pool(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run sync `fn` on the current pool (see the module docs), with the caller's context variables.

    The worker posts its answer straight to an asyncio future (one wake-up of the loop), not through
    a `concurrent.futures.Future` chained to one as `run_in_executor` does. A caller cancelled while
    its call still queues leaves it unrun; one cancelled while it runs leaves it running (`calls_running`).
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    executor(_current_pool.get()).submit(_run_for, loop, future, call)
    return await future


async def call_user_code(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await an async callable; run a sync one in a worker thread of its pool (so the endpoint keeps serving).

    A sync callable that returns an awaitable has it awaited too.
    """
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    result = await run_in_pool(fn, *args, **kwargs)
    return await result if inspect.isawaitable(result) else result


__all__ = [
    "Pool",
    "call_user_code",
    "calls_running",
    "endpoint_calls",
    "executor",
    "is_async_callable",
    "pool_size",
    "resize_pool",
    "run_in_pool",
]
