"""`AnswerLimits`' deadline: its own expiry is a `ModelError`, anything else passes through as it came."""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import AsyncIterator

import pytest

from tests.tools.patience import HANG_S
from v1.clients._answer_limits import AnswerLimits
from v1.errors import ModelError


async def test_the_deadline_ends_a_wait_in_one_model_error_and_leaves_the_task_uncancelled() -> None:
    limits = AnswerLimits("http://upstream/x", 100, 0.05)
    with pytest.raises(ModelError, match=r"took longer than 0\.05 s in all"):
        await limits.within(asyncio.sleep(HANG_S))
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_outer_timeout_is_the_outer_ones_not_the_answers() -> None:
    limits = AnswerLimits("http://upstream/x", 100, HANG_S)
    with pytest.raises(TimeoutError) as raised:
        async with asyncio.timeout(0.05):
            await limits.within(asyncio.sleep(HANG_S))
    assert not isinstance(raised.value, ModelError)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancellation_from_elsewhere_propagates_even_once_the_deadline_passed() -> None:
    limits = AnswerLimits("http://upstream/x", 100, 0.05)
    waiting = asyncio.create_task(limits.within(asyncio.sleep(HANG_S)))
    await asyncio.sleep(0)
    waiting.cancel()  # the task's own cancellation, before the deadline
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_the_transports_own_timeout_is_raised_as_it_came() -> None:
    async def read_timeout() -> None:
        raise TimeoutError("the transport's read timeout")

    limits = AnswerLimits("http://upstream/x", 100, HANG_S)
    with pytest.raises(TimeoutError, match="the transport's read timeout"):
        await limits.within(read_timeout())


async def test_chunks_past_the_deadline_end_in_one_model_error() -> None:
    async def drip() -> AsyncIterator[bytes]:
        yield b"a"
        await asyncio.sleep(HANG_S)
        yield b"b"

    limits = AnswerLimits("http://upstream/x", 100, 0.05)
    received: list[bytes] = []
    with pytest.raises(ModelError, match="took longer"):
        async for chunk in limits.bounded(drip()):
            received.append(chunk)
    assert received == [b"a"]


async def test_an_answer_within_its_deadline_leaves_nothing_of_its_caller_on_the_loop() -> None:
    """Plain asyncio keeps a cancelled timer in its heap until it reaches the front (or most are cancelled);
    a deadline's timer made in the caller's context would keep, say, a finished rollout's state alive."""

    class Held:
        pass

    held: contextvars.ContextVar[Held] = contextvars.ContextVar("held")
    loop = asyncio.get_running_loop()
    earlier = loop.call_later(HANG_S, lambda: None)  # in front of the deadline's timer, as other rollouts' are
    refs: list[weakref.ref[Held]] = []

    async def caller() -> str:
        value = Held()
        refs.append(weakref.ref(value))
        held.set(value)
        return await AnswerLimits("http://upstream/x", 100, HANG_S).within(asyncio.sleep(0, "answer"))

    try:
        assert await asyncio.create_task(caller()) == "answer"
        await asyncio.sleep(0)
        assert refs[0]() is None
    finally:
        earlier.cancel()
