"""`is_async_callable`: which callables `call_user_code` awaits in the loop and which it runs in a worker thread;
`run_in_pool`: what a worker hands back, and what a cancelled caller leaves run or unrun; the pools: how many
threads they start, and that a stuck call never holds up the interpreter's exit."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1._util.calling import call_user_code, calls_running, is_async_callable, pool_size, resize_pool, run_in_pool


async def coroutine_function(x: int) -> int:
    return x


def plain_function(x: int) -> int:
    return x


async def async_generator_function() -> AsyncIterator[int]:
    yield 1


class AsyncCallable:
    async def __call__(self, x: int) -> int:
        return x

    async def method(self, x: int) -> int:
        return x


class SyncCallable:
    def __call__(self, x: int) -> int:
        return x


@functools.wraps(coroutine_function)
def sync_wrapper_of_a_coroutine_function(x: int) -> Any:
    return coroutine_function(x)  # sync: it returns the coroutine, which `call_user_code` then awaits


def sync_function_with_attributes(x: int) -> int:
    return x


sync_function_with_attributes.weight = 2.0  # type: ignore[attr-defined]

MARKED: list[tuple[Any, bool]] = []
if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+: a plain `def` marked as a coroutine function

    def marked(x: int) -> Any:
        return coroutine_function(x)

    MARKED.append((inspect.markcoroutinefunction(marked), True))


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (coroutine_function, True),
        (functools.partial(coroutine_function, 1), True),
        (functools.partial(functools.partial(coroutine_function), 1), True),
        (AsyncCallable(), True),
        (AsyncCallable().method, True),
        (plain_function, False),
        (lambda x: x, False),
        (functools.partial(plain_function, 1), False),
        (SyncCallable(), False),
        (sync_wrapper_of_a_coroutine_function, False),
        (sync_function_with_attributes, False),
        *MARKED,
        (async_generator_function, False),
        (AsyncCallable, False),  # the class: calling it builds an instance
    ],
)
def test_is_async_callable(fn: Any, expected: bool) -> None:
    assert is_async_callable(fn) is expected


async def test_call_user_code_awaits_async_and_threads_sync() -> None:
    assert await call_user_code(coroutine_function, 3) == 3
    assert await call_user_code(plain_function, 4) == 4
    assert await call_user_code(AsyncCallable(), 5) == 5
    assert await call_user_code(sync_wrapper_of_a_coroutine_function, 6) == 6  # its coroutine awaited too


@contextlib.contextmanager
def user_threads(size: int) -> Iterator[None]:
    """The user-code pool at `size` threads within the block, then at its size before."""
    before = pool_size("user")
    resize_pool("user", size)
    try:
        yield
    finally:
        resize_pool("user", before)


@pytest.fixture
def one_user_thread() -> Iterator[None]:
    with user_threads(1):
        yield


async def test_a_call_whose_caller_is_cancelled_while_it_queues_never_runs(one_user_thread: None) -> None:
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocker() -> str:
        started.set()
        release.wait(10)
        ran.append("blocker")
        return "blocker"

    first = asyncio.ensure_future(run_in_pool(blocker))
    await asyncio.to_thread(started.wait, 10)
    queued = asyncio.ensure_future(run_in_pool(ran.append, "queued"))
    await asyncio.sleep(0.05)
    queued.cancel()
    first.cancel()  # running: it runs on, counted
    await asyncio.sleep(0.05)
    assert calls_running() == 1
    release.set()
    assert await run_in_pool(lambda: "after") == "after"  # the one thread is free again and served this
    assert ran == ["blocker"] and calls_running() == 0
    assert queued.cancelled() and first.cancelled()


var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


def raise_stop() -> None:
    raise StopIteration("early")


async def test_a_worker_hands_back_results_errors_and_the_callers_context() -> None:
    var.set("caller's")
    assert await run_in_pool(var.get) == "caller's"
    assert await run_in_pool(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        await run_in_pool(divmod, 1, 0)
    with pytest.raises(RuntimeError, match="StopIteration"):  # refused by a future: the caller must not hang
        await asyncio.wait_for(run_in_pool(raise_stop), 10)
    threads = {await run_in_pool(lambda: threading.current_thread().name) for _ in range(3)}
    assert all(name.startswith("v1-user") for name in threads)


@pytest.fixture
def two_user_threads() -> Iterator[None]:
    with user_threads(2):
        yield


async def test_calls_one_after_another_reuse_one_thread(two_user_threads: None) -> None:
    threads = [await run_in_pool(threading.current_thread) for _ in range(20)]
    assert len(set(threads)) == 1  # an idle thread takes the next call: none is started per call
    assert threads[0].daemon and threads[0].name.startswith("v1-user")


async def test_a_pool_starts_threads_up_to_its_size_and_queues_past_it(two_user_threads: None) -> None:
    release = threading.Event()
    started: list[threading.Thread] = []
    lock = threading.Lock()

    def blocker() -> threading.Thread:
        with lock:
            started.append(threading.current_thread())
        release.wait(HANG_S)
        return threading.current_thread()

    calls = [asyncio.ensure_future(run_in_pool(blocker)) for _ in range(3)]
    for _ in range(200):  # two threads start while the first two calls block; the third waits for one
        if len(started) == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert len(started) == 2 and calls_running() == 2
    release.set()
    threads = await asyncio.gather(*calls)
    assert len(set(threads)) == 2 and len(started) == 3


async def test_a_resized_pool_lets_the_old_threads_go() -> None:
    before = pool_size("user")
    old = await run_in_pool(threading.current_thread)
    resize_pool("user", before + 1)
    try:
        await asyncio.to_thread(old.join, HANG_S)
        assert not old.is_alive()
        assert await run_in_pool(threading.current_thread) is not old
    finally:
        resize_pool("user", before)


def test_a_stuck_sync_call_does_not_hold_up_the_interpreters_exit() -> None:
    script = textwrap.dedent(
        """
        import asyncio, threading
        from v1._util.calling import call_user_code

        async def main():
            call = asyncio.ensure_future(call_user_code(threading.Event().wait))  # waits for ever
            await asyncio.sleep(0.2)
            call.cancel()
            print("done", flush=True)

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr


async def test_a_call_that_outlives_its_loop_leaves_its_thread_serving(one_user_thread: None) -> None:
    release, started = threading.Event(), threading.Event()

    def blocker() -> None:
        started.set()
        release.wait(HANG_S)

    async def on_a_loop_that_closes() -> None:
        running = asyncio.ensure_future(run_in_pool(blocker))
        await asyncio.to_thread(started.wait, HANG_S)
        assert not running.done()

    await asyncio.to_thread(asyncio.run, on_a_loop_that_closes())  # its loop is closed with the call running
    release.set()
    assert await asyncio.wait_for(run_in_pool(lambda: "served"), 30) == "served"  # the pool's one thread lives on


async def test_a_call_submitted_to_a_pool_already_resized_away_runs_on_its_successor() -> None:
    """A caller that took the pool just before `resize_pool` replaced it: its call is handed on, not queued
    behind the old pool's end mark where no thread would ever take it."""
    from v1._util.calling import executor

    with user_threads(1):
        old = executor("user")
        assert await run_in_pool(threading.current_thread)  # the old pool has its one thread
        with user_threads(2):
            loop = asyncio.get_running_loop()
            future: asyncio.Future[str] = loop.create_future()
            old.submit(loop, future, lambda: threading.current_thread().name)
            assert (await asyncio.wait_for(future, 30)).startswith("v1-user")
