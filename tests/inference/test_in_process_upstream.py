"""The built-in server answers v1's upstream clients on its loop in process, and every call is still recorded by the endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import v1
from v1.clients import http_library, resolve_client
from v1.clients._in_process import serve_in_process, served_in_process
from v1.inference import InferenceServer, build_tiny_model

STREAMED = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stream": true}'
TRAINING_ARGS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 6, "logprobs": True, "return_token_ids": True}


@pytest.fixture
async def server() -> AsyncIterator[InferenceServer]:
    model, tokenizer = build_tiny_model({"seed": 2, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny") as running:
        yield running


def first_letter_env() -> Any:
    return v1.load_environment("tasksets.first_letter", harness={"max_turns": 1})


def recorded_tokens(states: list[Any]) -> list[tuple[list[int], list[int], list[float]]]:
    steps = [state["trajectory"] for state in states]
    assert all(len(trajectory) == 1 for trajectory in steps), "one recorded model call per rollout"
    tokens = [trajectory[0]["tokens"] for trajectory in steps]
    return [(t["prompt_ids"], t["completion_ids"], t["completion_logprobs"]) for t in tokens]


async def test_rollouts_in_process_record_the_same_tokens_and_logprobs_as_over_http(server: InferenceServer) -> None:
    env = first_letter_env()
    row = next(iter(env.get_dataset()))
    over_http = server.url.replace("127.0.0.1", "localhost")  # another base URL: not registered, so HTTP
    assert served_in_process(over_http) is None
    http_states = await env.run_group([row] * 3, v1.ClientConfig(api_base_url=over_http), "tiny", dict(TRAINING_ARGS))
    assert server.in_process_requests == 0
    local_states = await env.run_group([row] * 3, v1.ClientConfig(api_base_url=server.url), "tiny", dict(TRAINING_ARGS))
    assert server.in_process_requests == 3, "each rollout's call went to the server in process"
    assert server.stats["requests"] == 6
    assert not any(state.get("error") for state in http_states + local_states)
    http_tokens, local_tokens = recorded_tokens(http_states), recorded_tokens(local_states)
    for (prompt_a, completion_a, logprobs_a), (prompt_b, completion_b, logprobs_b) in zip(http_tokens, local_tokens):
        assert prompt_a == prompt_b and completion_a == completion_b and len(completion_a) > 0
        assert logprobs_a == pytest.approx(logprobs_b, abs=1e-5)
    assert [s["completion"] for s in http_states] == [s["completion"] for s in local_states]
    assert [s["reward"] for s in http_states] == [s["reward"] for s in local_states]


async def test_in_process_errors_are_the_sdk_errors_http_gives(server: InferenceServer) -> None:
    over_http = server.url.replace("127.0.0.1", "localhost")
    raised = []
    for url in (over_http, server.url):
        client = await resolve_client(v1.ClientConfig(api_base_url=url, max_retries=0))
        with pytest.raises(v1.Error) as caught:
            await client.get_response([{"role": "user", "content": "x"}], "no-such-model", {"max_tokens": 2})
        raised.append((type(caught.value), str(caught.value)))
    assert raised[0] == raised[1]
    assert "no-such-model" in raised[1][1]
    assert server.in_process_requests == 1, "the second was answered in process, refused as HTTP refuses it"


async def test_a_broken_in_process_upstream_fails_the_rollout_it_serves(server: InferenceServer) -> None:
    class Broken:
        async def handle_async_request(self, request: Any) -> Any:
            body = b'{"error": {"message": "engine on fire", "type": "server_error"}}'
            return http_library().Response(500, headers={"content-type": "application/json"}, content=body)

    broken = Broken()

    env = first_letter_env()
    row = next(iter(env.get_dataset()))
    serve_in_process(server.url, broken)
    try:
        client = v1.ClientConfig(api_base_url=server.url, max_retries=0)
        states = await env.run_group([row], client, "tiny", dict(TRAINING_ARGS))
    finally:
        serve_in_process(server.url, server)
    assert states[0].get("error"), "the failure is recorded, not bypassed over HTTP"
    assert "engine on fire" in str(states[0]["error"])
    assert server.stats["requests"] == 0


async def test_closing_the_server_unregisters_it_and_other_loops_go_over_http() -> None:
    model, tokenizer = build_tiny_model({"seed": 2, "max_position_embeddings": 256})
    async with InferenceServer(model, tokenizer, model_name="tiny") as running:
        url = running.url
        assert served_in_process(url) is running
        assert await running.answer_in_process("/models", b"{}") is None, "only chat and completions"
        assert await running.answer_in_process("/chat/completions", STREAMED) is None, "streams go over HTTP"
        status, body = await running.answer_in_process("/chat/completions", b"{not json")  # type: ignore[misc]
        assert status == 400 and body["error"]["type"] == "invalid_request_error"

        async def seen_from_another_loop() -> Any:
            return served_in_process(url)

        assert await asyncio.to_thread(asyncio.run, seen_from_another_loop()) is None, "another loop's clients use HTTP"
    assert served_in_process(url) is None
