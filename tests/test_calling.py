"""`is_async_callable`: which callables `call_user_code` awaits in the loop and which it runs in a worker thread."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from v1._util.calling import call_user_code, is_async_callable


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
