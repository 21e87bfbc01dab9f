"""`InferenceServer(seed=...)`: runs sample alike whatever order concurrent requests arrive in; no seed, no repeat."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.tools.patience import HANG_S
from v1.inference import InferenceServer, build_tiny_model

PROMPTS = ("abc", "xyz")


async def completions(server: InferenceServer, order: list[str], **fields: Any) -> dict[str, list[list[int]]]:
    """Each prompt's completions (sorted: rollouts of one prompt are interchangeable), sent concurrently in `order`."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:

        async def ask(content: str) -> tuple[str, list[int]]:
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": content}],
                "max_tokens": 6,
                "ignore_eos": True,
                "temperature": 1.0,
                "return_token_ids": True,
                **fields,
            }
            async with session.post(f"{server.url}/chat/completions", json=body) as response:
                assert response.status == 200, await response.text()
                return content, (await response.json())["choices"][0]["token_ids"]

        answers = await asyncio.gather(*(ask(content) for content in order))
    return {prompt: sorted(ids for content, ids in answers if content == prompt) for prompt in PROMPTS}


async def run(server_seed: int | None, orders: list[list[str]], **fields: Any) -> list[dict[str, list[list[int]]]]:
    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny", seed=server_seed) as server:
        rounds = []
        for order in orders:
            rounds.append(await completions(server, order, **fields))
            server.load_weights({})  # a trainer's push between rounds (here: the same weights)
        return rounds


async def test_the_same_seed_samples_alike_in_any_arrival_order() -> None:
    forward = [prompt for prompt in PROMPTS for _ in range(8)]
    shuffled = [PROMPTS[(index * 5) % 2] for index in range(16)][::-1]
    first = await run(7, [forward, forward])
    second = await run(7, [shuffled, list(reversed(forward))])
    assert first == second
    assert len({tuple(ids) for ids in first[0]["abc"]}) > 1, "the 8 rollouts of a prompt must differ from each other"
    # A prompt asked again after a weight push gets fresh draws, not the first round's (same weights here).
    assert first[1] != first[0]


async def test_another_seed_or_none_samples_differently_and_a_request_seed_wins() -> None:
    order = [prompt for prompt in PROMPTS for _ in range(8)]
    seeded = (await run(7, [order]))[0]
    assert (await run(8, [order]))[0] != seeded
    assert (await run(None, [order]))[0] != (await run(None, [order]))[0]
    own_seed = (await run(7, [order], seed=123))[0]
    assert own_seed == (await run(None, [order], seed=123))[0], "a request's own seed is used as it is"


def test_a_seed_out_of_range_is_refused() -> None:
    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 64})
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match="seed must be in"):
            InferenceServer(model, tokenizer, seed=bad)


def test_request_seeds_count_per_prompt_restart_per_version_and_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from v1.inference import _request_seeds as request_seeds
    from v1.inference._request_seeds import MAX_SEED, RequestSeeds

    seeds = RequestSeeds(5)
    first = [seeds.next([1, 2, 3], 1, 0) for _ in range(4)]
    assert len(set(first)) == 4 and all(0 <= seed < MAX_SEED for seed in first)
    again = RequestSeeds(5)
    assert [again.next([9], 1, 0), *[again.next([1, 2, 3], 1, 0) for _ in range(4)]][1:] == first  # other prompts don't shift it
    assert seeds.next([1, 2, 3], 1, 1) not in first  # a new weight version: fresh draws
    monkeypatch.setattr(request_seeds, "MAX_COUNTED_PROMPTS", 3)
    bounded = RequestSeeds(5)
    for prompt in range(10):
        bounded.next([prompt], 1, 0)
    assert len(bounded._counts) <= 3
