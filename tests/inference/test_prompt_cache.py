"""`PromptCache` alone and in the built-in server: one render per distinct prompt, shared by concurrent callers, bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.tools.patience import HANG_S
from v1.inference import InferenceServer, build_tiny_model
from v1.inference._prompt_cache import PromptCache
from v1.inference._protocol import RequestError


def counting(
    ids: list[int], started: threading.Event | None = None, release: threading.Event | None = None
) -> tuple[Callable[[], list[int]], list[int]]:
    calls: list[int] = []

    def render() -> list[int]:
        calls.append(1)
        if started is not None and release is not None:
            started.set()
            release.wait(HANG_S)
        return list(ids)

    return render, calls


async def test_concurrent_misses_render_once_and_later_calls_hit() -> None:
    cache = PromptCache()
    started, release = threading.Event(), threading.Event()
    render, calls = counting([1, 2, 3], started, release)
    first = asyncio.ensure_future(cache.ids("a", render))
    assert await asyncio.to_thread(started.wait, HANG_S)
    joined = [asyncio.ensure_future(cache.ids("a", render)) for _ in range(7)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(first, *joined)
    assert results == [[1, 2, 3]] * 8 and len(calls) == 1
    assert await cache.ids("a", render) == [1, 2, 3] and len(calls) == 1
    assert (cache.hits, cache.misses) == (8, 1)  # seven joined the render, one found it kept


async def test_callers_get_copies_the_cache_cannot_be_changed_through() -> None:
    cache = PromptCache()
    render, _ = counting([5, 6])
    mine = await cache.ids("k", render)
    mine.append(99)
    assert await cache.ids("k", render) == [5, 6]


async def test_a_failed_render_reaches_every_joined_caller_and_is_not_kept() -> None:
    cache = PromptCache()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def broken() -> list[int]:
        calls.append(1)
        started.set()
        release.wait(HANG_S)
        raise RequestError("cannot apply the chat template")

    first = asyncio.ensure_future(cache.ids("bad", broken))
    assert await asyncio.to_thread(started.wait, HANG_S)
    second = asyncio.ensure_future(cache.ids("bad", broken))
    await asyncio.sleep(0)
    release.set()
    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert all(isinstance(outcome, RequestError) for outcome in outcomes) and len(calls) == 1
    render, good_calls = counting([7])
    assert await cache.ids("bad", render) == [7] and len(good_calls) == 1  # rendered again, not the kept failure


async def test_the_token_budget_drops_the_least_recently_used_first() -> None:
    cache = PromptCache(max_tokens=10)
    for key in ("a", "b", "c"):
        await cache.ids(key, counting([0] * 4)[0])  # 12 tokens for a budget of 10: "a" goes
    assert len(cache) == 2
    render, calls = counting([0] * 4)
    await cache.ids("b", render)  # touched: "c" is now the oldest
    await cache.ids("d", render)
    assert len(calls) == 1  # "b" was a hit, "d" a miss
    await cache.ids("b", render)
    assert len(calls) == 1, "the recently used entry was dropped instead of the oldest"
    await cache.ids("huge", counting([0] * 11)[0])  # longer than the whole budget: answered, never kept
    assert len(cache) == 2
    with pytest.raises(ValueError, match="max_tokens"):
        PromptCache(max_tokens=-1)


@pytest.fixture
async def server() -> AsyncIterator[InferenceServer]:
    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny") as running:
        yield running


async def chat(session: aiohttp.ClientSession, server: InferenceServer, **fields: Any) -> dict[str, Any]:
    body = {"model": "tiny", "max_tokens": 2, "return_token_ids": True, **fields}
    async with session.post(f"{server.url}/chat/completions", json=body) as response:
        assert response.status == 200, await response.text()
        return dict(await response.json())


async def test_a_group_of_identical_requests_renders_its_prompt_once(server: InferenceServer) -> None:
    messages = [{"role": "user", "content": "fgc"}]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
        answers = await asyncio.gather(*(chat(session, server, messages=messages) for _ in range(8)))
        assert server.stats["prompt_cache_misses"] == 1 and server.stats["prompt_cache_hits"] == 7
        prompt_ids = answers[0]["prompt_token_ids"]
        assert all(answer["prompt_token_ids"] == prompt_ids for answer in answers)
        expected = server.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert prompt_ids == list(server.tokenizer(expected, add_special_tokens=False)["input_ids"])

        again = await chat(session, server, messages=messages)
        assert again["prompt_token_ids"] == prompt_ids and server.stats["prompt_cache_hits"] == 8

        # Anything else the template reads is part of the key: each of these renders anew.
        await chat(session, server, messages=messages, add_generation_prompt=False)
        await chat(session, server, messages=messages, chat_template_kwargs={"enable_thinking": False})
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
        with_tools = await chat(session, server, messages=messages, tools=[tool])
        await chat(session, server, messages=[{"role": "user", "content": "fgd"}])
        assert server.stats["prompt_cache_misses"] == 5 and server.stats["prompt_cache_hits"] == 8
        assert with_tools["prompt_token_ids"] != prompt_ids
