"""The built-in inference server over real HTTP with a tiny model: the openai SDK, token ids, batching, weight updates, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import torch

from tests.tools.patience import HANG_S, arrives
from v1.inference import InferenceServer, build_tiny_model, save_tiny_model

GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 8}


@pytest.fixture
async def server() -> AsyncIterator[InferenceServer]:
    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny") as running:
        yield running


@pytest.fixture
async def client(server: InferenceServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0) as sdk:
        yield sdk


def forward_logprobs(server: InferenceServer, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """The model's own log-probability of each completion token, from one forward pass over prompt + completion."""
    with torch.no_grad():
        logits = server.model(torch.tensor([prompt_ids + completion_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt_ids) - 1 + i, token]) for i, token in enumerate(completion_ids)]


async def test_chat_answers_the_openai_sdk_streamed_and_not(client: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    whole = await client.chat.completions.create(model="tiny", messages=messages, **GREEDY)
    assert whole.choices[0].finish_reason in ("stop", "length") and whole.choices[0].message.role == "assistant"
    assert whole.usage is not None and whole.usage.completion_tokens == 8 and whole.usage.prompt_tokens > 0

    stream = await client.chat.completions.create(
        model="tiny", messages=messages, stream=True, stream_options={"include_usage": True}, **GREEDY
    )
    pieces, usage, finish = [], None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason and usage is not None and usage.completion_tokens == 8


async def test_chat_answers_list_of_parts_content_like_strings_for_every_role(client: openai.AsyncOpenAI) -> None:
    roles = [("system", "be brief"), ("user", "hello"), ("assistant", "hi"), ("user", "again")]
    as_strings: list[Any] = [{"role": role, "content": text} for role, text in roles]
    as_parts: list[Any] = [{"role": role, "content": [{"type": "text", "text": text}]} for role, text in roles]
    body = {"return_token_ids": True}
    answers = [
        (
            await client.chat.completions.with_raw_response.create(model="tiny", messages=m, extra_body=body, **GREEDY)
        ).http_response.json()
        for m in (as_strings, as_parts)
    ]
    assert answers[0]["prompt_token_ids"] == answers[1]["prompt_token_ids"]
    assert answers[0]["choices"][0]["token_ids"] == answers[1]["choices"][0]["token_ids"]


async def test_completions_answer_the_openai_sdk_streamed_and_not(client: openai.AsyncOpenAI) -> None:
    whole = await client.completions.create(model="tiny", prompt="abc", **GREEDY)
    assert whole.usage is not None and whole.usage.completion_tokens == 8
    stream = await client.completions.create(model="tiny", prompt="abc", stream=True, **GREEDY)
    assert "".join([c.choices[0].text async for c in stream]) == whole.choices[0].text

    batch = await client.completions.create(model="tiny", prompt=["abc", [97, 98, 99]], n=2, **GREEDY)
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert len({c.text for c in batch.choices}) == 1, "greedy choices of the same prompt, as text or as ids, agree"


async def test_token_ids_and_logprobs_match_a_forward_pass(server: InferenceServer, client: openai.AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "count: 1 2 3"}]
    answer = (
        await client.chat.completions.with_raw_response.create(
            model="tiny", messages=messages, logprobs=True, top_logprobs=2, extra_body={"return_token_ids": True}, **GREEDY
        )
    ).http_response.json()
    prompt_ids, choice = answer["prompt_token_ids"], answer["choices"][0]
    rendered = server.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt_ids == server.tokenizer(rendered, add_special_tokens=False)["input_ids"]
    served = [item["logprob"] for item in choice["logprobs"]["content"]]
    assert len(choice["token_ids"]) == len(served) == 8
    assert served == pytest.approx(forward_logprobs(server, prompt_ids, choice["token_ids"]), abs=1e-4)
    assert all(item["top_logprobs"][0]["logprob"] >= item["logprob"] for item in choice["logprobs"]["content"])

    completion = (
        await client.completions.with_raw_response.create(
            model="tiny", prompt=prompt_ids, logprobs=1, extra_body={"return_token_ids": True}, **GREEDY
        )
    ).http_response.json()["choices"][0]
    assert completion["prompt_token_ids"] == prompt_ids and completion["token_ids"] == choice["token_ids"]
    assert completion["logprobs"]["token_logprobs"] == pytest.approx(served, abs=1e-5)


async def test_streamed_token_ids_add_up_to_the_whole_answer(client: openai.AsyncOpenAI) -> None:
    body: dict[str, Any] = {"return_token_ids": True}
    whole = (
        await client.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], extra_body=body, **GREEDY
        )
    ).http_response.json()
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "x"}], stream=True, extra_body=body, **GREEDY
    )
    chunks = [chunk.model_dump() async for chunk in stream]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    streamed = [t for chunk in chunks for choice in chunk["choices"] for t in choice.get("token_ids") or []]
    assert streamed == whole["choices"][0]["token_ids"]


async def test_concurrent_requests_are_batched_and_match_sequential_greedy(
    server: InferenceServer, client: openai.AsyncOpenAI
) -> None:
    prompts = [f"prompt number {i} " + "x" * (3 * i) for i in range(6)]

    async def ask(prompt: str) -> tuple[list[int], list[float]]:
        raw = await client.completions.with_raw_response.create(
            model="tiny", prompt=prompt, logprobs=0, extra_body={"return_token_ids": True}, temperature=0, max_tokens=12
        )
        choice = raw.http_response.json()["choices"][0]
        return choice["token_ids"], choice["logprobs"]["token_logprobs"]

    sequential = [await ask(p) for p in prompts]
    assert server.stats["max_batch_size"] == 1
    steps_before = server.stats["decode_steps"]
    concurrent = await asyncio.gather(*(ask(p) for p in prompts))
    assert server.stats["max_batch_size"] > 1, "concurrent requests must share decoding steps"
    assert server.stats["decode_steps"] - steps_before < 6 * 11, "batched decoding takes fewer steps than one per token"
    for (ids_a, logprobs_a), (ids_b, logprobs_b) in zip(sequential, concurrent):
        assert ids_a == ids_b
        assert logprobs_a == pytest.approx(logprobs_b, abs=1e-4)


async def test_n_choices_with_a_seed_are_reproducible(client: openai.AsyncOpenAI) -> None:
    def ask() -> Any:
        return client.completions.create(model="tiny", prompt="seed", n=3, seed=7, temperature=1.0, max_tokens=10)

    first, second = await ask(), await ask()
    assert [c.text for c in first.choices] == [c.text for c in second.choices]
    assert len({c.text for c in first.choices}) > 1, "the choices of one request are sampled independently"


async def test_update_weights_changes_the_served_logprobs(server: InferenceServer, tmp_path: Path) -> None:
    async def served_logprobs() -> list[float]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
            async with session.post(
                f"{server.url}/completions",
                json={"model": "tiny", "prompt": [65, 66, 67], "max_tokens": 4, "temperature": 0, "logprobs": 0},
            ) as response:
                return (await response.json())["choices"][0]["logprobs"]["token_logprobs"]  # type: ignore[no-any-return]

    before = await served_logprobs()
    checkpoint = save_tiny_model({"seed": 2, "max_position_embeddings": 256}, tmp_path / "checkpoint")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
        async with session.post(f"{server.url.removesuffix('/v1')}/update_weights", json={"path": str(checkpoint)}) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["weight_version"] == 1
    after_route = await served_logprobs()
    assert after_route != pytest.approx(before, abs=1e-3)

    original, _ = build_tiny_model({"seed": 1, "max_position_embeddings": 256})
    assert server.load_weights(original.state_dict()) == 2
    assert await served_logprobs() == pytest.approx(before, abs=1e-5), "loading the first weights back serves the first logprobs"


async def test_load_weights_refuses_unknown_names_and_shapes(server: InferenceServer) -> None:
    with pytest.raises(ValueError, match="unknown weight names"):
        server.load_weights({"not.a.weight": torch.zeros(1)})
    name, tensor = next(iter(server.model.state_dict().items()))
    with pytest.raises(ValueError, match="shape"):
        server.load_weights({name: torch.zeros(*tensor.shape, 2)})
    assert server.weight_version == 0


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400, None),
    ("/v1/chat/completions", b"[1, 2]", 400, None),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
        400,
        "max_tokens",
    ),
    ("/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 100000}, 400, "n"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "y" * 400}]}, 400, "messages"),
    ("/v1/chat/completions", {"model": "tiny", "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"content": "no role"}]}, 400, "messages[0]"),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": -1},
        400,
        "temperature",
    ),
    ("/v1/completions", {"model": "tiny", "prompt": [999999]}, 400, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": "hi", "logit_bias": {"1": 5}}, 400, "logit_bias"),
    ("/v1/completions", {"model": "tiny"}, 400, "prompt"),
    ("/update_weights", {"path": "/does/not/exist"}, 400, "path"),
    ("/update_weights", {}, 400, "path"),
]


@pytest.mark.parametrize(("route", "body", "status", "param"), BAD_REQUESTS)
async def test_bad_input_gets_a_4xx_in_openai_error_shape(
    server: InferenceServer, route: str, body: Any, status: int, param: str | None
) -> None:
    base = server.url.removesuffix("/v1")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
        kwargs: dict[str, Any] = (
            {"data": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, bytes) else {"json": body}
        )
        async with session.post(f"{base}{route}", **kwargs) as response:
            assert response.status == status
            error = (await response.json())["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["param"] == param
    assert server.stats["requests"] == 0, "a refused request never reaches the engine"


async def test_overlong_prompt_is_an_overlong_prompt_error_for_v1_clients(server: InferenceServer) -> None:
    import v1 as vf
    from v1.clients import resolve_client

    client = await resolve_client(vf.ClientConfig(api_base_url=server.url, max_retries=0))
    with pytest.raises(vf.OverlongPromptError):
        await client.get_response([{"role": "user", "content": "z" * 400}], "tiny", {"max_tokens": 4})


async def test_a_client_that_goes_away_stops_its_generation(server: InferenceServer) -> None:
    body = {"model": "tiny", "prompt": "go", "max_tokens": 200, "ignore_eos": True, "stream": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session:
        async with session.post(f"{server.url}/completions", json=body) as response:
            await response.content.readline()
    await arrives(lambda: server.stats["cancelled"], "the server to notice the client left")
    assert server.stats["cancelled"] == 1
    assert server.stats["decoded_tokens"] < 199, "generation stopped before max_tokens"
