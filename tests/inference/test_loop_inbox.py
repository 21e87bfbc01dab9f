"""`LoopInbox` and the engine's `on_step_end`: events reach their queues in order, one loop wake-up per engine step."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest

from tests.tools.patience import HANG_S
from v1.inference import InferenceServer, build_tiny_model
from v1.inference._loop_inbox import LoopInbox


async def test_items_wait_for_the_flush_then_arrive_in_order_with_one_drain() -> None:
    inbox = LoopInbox(asyncio.get_running_loop())
    first: asyncio.Queue[int] = asyncio.Queue()
    second: asyncio.Queue[int] = asyncio.Queue()

    def produce() -> None:
        for item in range(100):
            inbox.put(first if item % 2 else second, item)

    await asyncio.to_thread(produce)
    await asyncio.sleep(0.01)
    assert first.empty() and second.empty() and inbox.drains == 0, "items arrived before the producer flushed"
    await asyncio.to_thread(inbox.flush)
    await asyncio.to_thread(inbox.flush)  # nothing new: no second wake-up
    got_first = [await asyncio.wait_for(first.get(), HANG_S) for _ in range(50)]
    got_second = [await asyncio.wait_for(second.get(), HANG_S) for _ in range(50)]
    await asyncio.sleep(0.01)
    assert got_first == list(range(1, 100, 2)) and got_second == list(range(0, 100, 2))
    assert inbox.drains == 1


def test_a_flush_to_a_closed_loop_raises_and_a_later_loop_is_not_blocked() -> None:
    loop = asyncio.new_event_loop()
    inbox = LoopInbox(loop)
    inbox.put(asyncio.Queue(), 1)
    loop.close()
    with pytest.raises(RuntimeError):
        inbox.flush()
    with pytest.raises(RuntimeError):  # still tries (not stuck as "scheduled"), still says why
        inbox.flush()


async def test_the_server_wakes_its_loop_about_once_per_engine_step() -> None:
    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny", max_batch_size=64) as server:
        body = {"model": "tiny", "max_tokens": 6, "ignore_eos": True, "messages": [{"role": "user", "content": "abc"}]}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:

            async def ask(content: str) -> dict:
                request = {**body, "messages": [{"role": "user", "content": content}]}
                async with session.post(f"{server.url}/chat/completions", json=request) as response:
                    assert response.status == 200
                    return dict(await response.json())

            answers = await asyncio.gather(*(ask(f"prompt {index}") for index in range(48)))
        assert all(answer["usage"]["completion_tokens"] == 6 for answer in answers)
        inbox = next(iter(server._inboxes.values()))
        stats = server.stats
        events = 48 * 6 + 48  # a token event per step per choice, and one end per request
        steps = stats["decode_steps"] + stats["prefill_passes"]
        assert inbox.drains <= steps + 1, f"{inbox.drains} wake-ups for {steps} engine steps ({events} events)"


def test_a_failed_prefill_ends_its_requests_then_calls_on_step_end() -> None:
    from v1.inference._engine import Engine, GenerationRequest, SamplingParams

    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 64})
    ended = threading.Event()
    seen: list[object] = []
    engine = Engine(model, tokenizer, on_step_end=ended.set)
    engine.start()
    try:
        vocab = len(tokenizer)
        bad = GenerationRequest(prompt_ids=[vocab + 5], params=SamplingParams(max_tokens=2), on_event=seen.append)
        engine.submit(bad)  # an id past the embedding table: the step fails
        assert ended.wait(HANG_S)  # after the failure was delivered, on the same thread
        assert seen == [None] and isinstance(bad.error, IndexError), "the admitted request was never ended: its reader hangs"
    finally:
        engine.stop()
