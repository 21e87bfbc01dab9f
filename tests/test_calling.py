"""`is_async_callable`: which callables `call_user_code` awaits in the loop and which it runs in a worker thread;
`run_in_pool`: what a worker hands back, and what a cancelled caller leaves run or unrun."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

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


@pytest.fixture
def one_user_thread() -> Iterator[None]:
    before = pool_size("user")
    resize_pool("user", 1)
    yield
    resize_pool("user", before)


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
