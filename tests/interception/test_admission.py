"""What the endpoint admits: a replay only of the very same body, keys that die with the program phase."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import aiohttp
import pytest

import v1 as vf
from tests.tools.patience import HANG_S, arrives, growing_limits
from v1.clients import resolve_client
from v1.interception import RolloutSession, get_endpoint, upstream
from v1.testing import MockModelServer, Reply

BODY = {"model": "m", "messages": [{"role": "user", "content": "hang"}]}


async def open_rollout(mock: MockModelServer, max_turns: int | None = None) -> tuple[vf.State, RolloutSession]:
    endpoint = await get_endpoint()
    state = vf.State.for_task({"prompt": "hi"})
    upstream(state).client = await resolve_client(vf.ClientConfig(api_base_url=mock.url, max_retries=0))
    state.runtime.model = "m"
    state.runtime.max_turns = max_turns  # the harness's limit: the session reads it as it opens
    return state, endpoint.open(state)


async def post(url: str, key: str, content: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as http:
        request = http.post(f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}", **(headers or {})})
        async with request as answer:
            return answer.status, json.loads(await answer.text())


async def test_an_idempotency_key_replays_only_a_byte_identical_body(mock: MockModelServer) -> None:
    mock.responder = lambda request: Reply.text(request.last_user_text.upper())
    state, session = await open_rollout(mock)
    same = {"Idempotency-Key": "key-1"}
    first = await post(session.base_url, session.api_key, "first", same)
    replay = await post(session.base_url, session.api_key, "first", same)
    other = await post(session.base_url, session.api_key, "second", same)
    assert first[0] == replay[0] == other[0] == 200
    assert replay[1]["choices"] == first[1]["choices"]
    assert other[1]["choices"][0]["message"]["content"] == "SECOND"
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["FIRST", "SECOND"]
    assert len(mock.requests) == 2


async def test_the_programs_key_dies_with_its_program_phase(mock: MockModelServer) -> None:
    """B5: calls after the program phase with the program's key are refused; the framework's own key works, unrecorded."""
    state, session = await open_rollout(mock)
    program_config = state.get_endpoint_config()
    assert (await post(program_config["base_url"], program_config["api_key"], "turn"))[0] == 200
    session.end_program_phase()
    status, body = await post(program_config["base_url"], program_config["api_key"], "after")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    framework = await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "judge"}])
    assert framework.choices[0].message.content
    assert len(state["trajectory"]) == 1 and len(mock.requests) == 2
    assert state.get_endpoint_config()["api_key"] != program_config["api_key"]


async def test_the_program_phase_ends_with_only_the_key_of_the_endpoint_access_changed(mock: MockModelServer) -> None:
    """Every field of `state.runtime.endpoint` but `api_key` carries over to the framework's phase."""
    state, session = await open_rollout(mock)
    before = state.runtime.endpoint
    assert before is not None
    state.runtime.endpoint = before = dataclasses.replace(before, open=False)
    session.end_program_phase()
    after = state.runtime.endpoint
    assert after is not None and after.api_key == session.api_key != before.api_key
    for kept in dataclasses.fields(before):
        if kept.name != "api_key":
            assert getattr(after, kept.name) is getattr(before, kept.name), kept.name


@pytest.mark.parametrize("key", ["", "v1-", "x" * 4000, "v1-\u00e9 \t"], ids=["empty", "prefix", "huge", "odd"])
async def test_hostile_keys_after_the_program_phase_are_one_401(mock: MockModelServer, key: str) -> None:
    _, session = await open_rollout(mock)
    session.end_program_phase()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as http:
        headers = {"Authorization": f"Bearer {key}".encode("utf-8", "replace").decode("latin-1")}
        async with http.post(f"{session.base_url}/chat/completions", data=b"{}", headers=headers) as answer:
            assert answer.status == 401
    assert mock.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_upstream_outage_past_the_timeout_is_a_retryable_error(mock: MockModelServer, stream: bool) -> None:
    """503s that outlast timeout_seconds were recorded as a scored `timeout_reached` with no error."""
    mock.responder = lambda request: Reply.fail(503, "overloaded", retry_after=0.2)

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        created = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=stream)
        if stream:
            async for _ in created:
                pass

    client = vf.ClientConfig(api_base_url=mock.url, max_retries=1000)
    for limit in growing_limits(1.5):  # the limit must outlast the first 503: on a loaded machine, try longer
        mock.reset()
        state = await vf.Harness(client=client, model="m", program=program, timeout_seconds=limit).run({"prompt": "hi"})
        if mock.requests:
            break
    assert state["error"] is not None and state["error"]["type"] == "ModelError", state["error"]
    assert "still failing" in state["error"]["message"]
    error_class = vf.errors.error_class(state["error"]["type"])
    assert error_class is not None and error_class.retryable
    assert state["stop_condition"] == "has_error"


async def test_a_slow_but_healthy_upstream_past_the_timeout_is_still_a_timeout(mock: MockModelServer) -> None:
    mock.responder = lambda request: Reply.hang()  # an hour: only the rollout's timeout ends it

    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    state = await vf.Harness(client=client, model="m", program=program, timeout_seconds=1).run({"prompt": "hi"})
    assert state["error"] is None and state["stop_condition"] == "timeout_reached"


@pytest.mark.parametrize(
    ("route", "body", "shape"),
    [
        ("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "openai"),
        ("/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, "anthropic"),
    ],
    ids=["openai", "anthropic"],
)
async def test_calls_past_the_in_flight_cap_get_a_429_in_the_dialects_shape(
    mock: MockModelServer, route: str, body: dict[str, Any], shape: str
) -> None:
    from v1.interception._server import MAX_CALLS_IN_FLIGHT

    mock.responder = lambda request: Reply.hang()  # an hour: they stay in flight however slow the test
    _, session = await open_rollout(mock, max_turns=10 * MAX_CALLS_IN_FLIGHT)
    headers = {"Authorization": f"Bearer {session.api_key}", "x-api-key": session.api_key}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=HANG_S)
    ) as http:
        hanging = [
            asyncio.create_task(http.post(f"{session.base_url}/chat/completions", json=BODY, headers=headers))
            for _ in range(MAX_CALLS_IN_FLIGHT)
        ]
        await arrives(lambda: session.calls_in_flight == MAX_CALLS_IN_FLIGHT, "the calls in flight")
        async with http.post(f"{session.base_url}{route}", json=body, headers=headers) as answer:
            refused = await answer.json()
            assert answer.status == 429 and answer.headers["Retry-After"] == "1"
        for task in hanging:
            task.cancel()
        await asyncio.gather(*hanging, return_exceptions=True)
    if shape == "openai":
        assert refused["error"]["code"] == "too_many_calls_in_flight"
    else:
        assert refused["type"] == "error" and refused["error"]["type"] == "rate_limit_error"
    assert len(mock.requests) <= MAX_CALLS_IN_FLIGHT
