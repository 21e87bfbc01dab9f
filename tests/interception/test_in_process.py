"""The in-process path into the endpoint answers exactly like HTTP does.

`state.get_client()` hands in-process programs SDK clients whose requests enter the
endpoint's handler without a socket; programs out of process reach the same handler
over HTTP. Each test makes the same calls both ways in one rollout (upstream: a real
`MockModelServer`) and compares what the program sees and what was recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients._in_process import InProcessTransport, served_in_process
from v1.programs import call_model
from v1.testing import MockModelServer, Reply

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def harness(mock: MockModelServer, program: Any, **kwargs: Any) -> vf.Harness:
    return vf.Harness(
        program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", max_turns=20, **kwargs
    )


TOKENS = {"logprobs": True, "return_token_ids": True}  # what a trainer asks for (`v1.train`)


def over_http(state: vf.State) -> openai.AsyncOpenAI:
    config = state.get_endpoint_config()
    return openai.AsyncOpenAI(base_url=config["base_url"], api_key=config["api_key"], max_retries=0)


async def test_answers_streams_and_records_alike(mock: MockModelServer) -> None:
    mock.script(*[Reply.text("olleh")] * 4)
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        seen["transport"] = type(state.get_client()._client._transport_for_url(state.get_client().base_url))
        async with over_http(state) as http_client:
            for name, client in (("in_process", state.get_client()), ("http", http_client)):
                answer = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
                stream = await client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
                pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
                seen[name] = (
                    answer.choices[0].message.content,
                    answer.choices[0].finish_reason,
                    "".join(p or "" for p in pieces),
                )

    state = await harness(mock, program).run({"prompt": "x"})
    assert state["error"] is None
    assert seen["transport"] is InProcessTransport
    assert seen["in_process"] == seen["http"] == ("olleh", "stop", "olleh")
    steps = state["trajectory"]
    assert len(steps) == 4 and all(step["completion"][0]["content"] == "olleh" for step in steps)


async def test_refusals_are_the_same_errors(mock: MockModelServer) -> None:
    failures: dict[str, list[tuple[type[Exception], int, Any]]] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        async with over_http(state) as http_client:
            for name, client in (("in_process", state.get_client()), ("http", http_client)):
                found = failures.setdefault(name, [])
                for kwargs in ({"messages": "not a list"}, {"messages": [{"role": {"x": 1}, "content": "hi"}]}):
                    try:
                        await client.chat.completions.create(model="m", **kwargs)  # type: ignore[call-overload]
                    except openai.APIStatusError as exc:
                        found.append((type(exc), exc.status_code, exc.body))
                wrong_key = client.with_options(api_key="v1-wrong")
                try:
                    await wrong_key.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
                except openai.APIStatusError as exc:
                    found.append((type(exc), exc.status_code, exc.body))

    state = await harness(mock, program).run({"prompt": "x"})
    assert state["error"] is None and state["trajectory"] == []
    assert failures["in_process"] == failures["http"]
    assert [status for _, status, _ in failures["in_process"]] == [400, 400, 401]
    assert failures["in_process"][2][0] is openai.AuthenticationError


async def test_the_base_loop_path_records_like_the_sdk_path(mock: MockModelServer) -> None:
    mock.script(Reply.text("one"), Reply.text("two"))
    answers: list[Any] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        answers.append((await call_model(state, {"messages": USER}))["choices"][0]["message"]["content"])
        for request in ({"messages": "not a list"}, {"messages": [{"role": {"x": 1}, "content": "hi"}]}):
            try:
                await call_model(state, request)
            except openai.APIStatusError as exc:
                answers.append((type(exc), exc.status_code))
        answer = await state.get_client().chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        answers.append(answer.choices[0].message.content)

    state = await harness(mock, program).run({"prompt": "x"})
    assert state["error"] is None
    assert answers == ["one", (openai.BadRequestError, 400), (openai.BadRequestError, 400), "two"]
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["one", "two"]


async def test_no_in_process_endpoint_means_the_network() -> None:
    assert served_in_process("http://127.0.0.1:9/r/x/v1") is None


async def test_a_closed_rollout_is_refused_in_process_as_over_http(mock: MockModelServer) -> None:
    kept: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        kept["client"] = state.get_client()
        kept["config"] = state.get_endpoint_config()

    await harness(mock, program).run({"prompt": "x"})
    with pytest.raises(openai.AuthenticationError):
        await kept["client"].chat.completions.create(model="m", messages=USER)
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        answer = await http.post(
            kept["config"]["base_url"] + "/chat/completions",
            json={"model": "m", "messages": USER},
            headers={"Authorization": f"Bearer {kept['config']['api_key']}"},
        )
    assert answer.status_code == 401


async def test_a_program_timed_out_mid_call_gets_no_step_after_its_rollout_ended(mock: MockModelServer) -> None:
    """The base loop's call runs in the program's task: its timeout ends the call too, so no answer
    arriving later is appended to a trajectory the harness already finalized and returned."""
    mock.script(Reply.text("too late", delay=0.5))
    state = await vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", timeout_seconds=0.2).run(
        {"prompt": "x"}
    )
    assert state["stop_condition"] == "timeout_reached" and state["trajectory"] == []
    await asyncio.sleep(1.5)  # past the upstream's delay: an answer still awaited would be recorded by now
    assert state["trajectory"] == [] and len(mock.requests) == 1


async def test_a_streamed_answer_through_the_tool_loops_post_comes_back_whole_and_is_recorded(mock: MockModelServer) -> None:
    mock.script(Reply.text("streamed"))
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        access = state.runtime.endpoint
        assert access is not None
        body = json.dumps({"model": "m", "messages": USER, "stream": True}).encode()
        headers = {"authorization": "Bearer " + access.api_key, "content-type": "application/json"}
        answer = await access.pools.transport.post(access.base_url + "/chat/completions", headers, body)
        seen["answer"] = answer

    state = await harness(mock, program).run({"prompt": "x"})
    answer = seen["answer"]
    assert state["error"] is None and answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in answer.body.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join((json.loads(event)["choices"] or [{}])[0].get("delta", {}).get("content") or "" for event in events[:-1])
    assert text == "streamed" and [step["completion"][0]["content"] for step in state["trajectory"]] == ["streamed"]


async def test_an_sdk_call_cut_off_by_the_programs_time_limit_records_no_step_after_the_rollout_ended(
    mock: MockModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An SDK request over loopback HTTP keeps its own handler task after the program is cancelled: an
    answer arriving after the rollout ended must not be appended to the state `run()` already returned."""
    mock.script(Reply.text("too late", delay=0.5))

    async def program(task: vf.Task, state: vf.State) -> None:
        await over_http(state).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    slow = vf.Harness(
        program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", timeout_seconds=0.2
    )
    state = await slow.run({"prompt": "x"})
    assert state["stop_condition"] == "timeout_reached" and state["trajectory"] == []
    await asyncio.sleep(1.5)  # past the upstream's delay: the handler task has had its answer by now
    assert state["trajectory"] == [] and len(mock.requests) == 1 and state["timing"]["model"]["duration"] == 0.0
    assert not [record for record in caplog.records if record.name.startswith("v1") and record.levelno >= logging.ERROR]


# -- v1's own calls: the answer's value, not its text ---------------------------------------------


async def test_the_base_loop_path_gets_the_value_the_http_path_writes_and_refuses_alike(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`call_model` in process gets the answer's JSON value itself (never written and read back): the
    same value a program over HTTP reads, token ids and logprobs included, and the same refusals."""
    mock.script(*[Reply.tool("add", {"a": 1, "b": 2})] * 2)
    seen: dict[str, Any] = {}
    request = {"model": "m", "messages": USER}

    async def program(task: vf.Task, state: vf.State) -> None:
        seen["in_process"] = await call_model(state, {"messages": USER})
        config = state.get_endpoint_config()
        auth = {"Authorization": f"Bearer {config['api_key']}"}
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answer = await http.post(config["base_url"] + "/chat/completions", json=request, headers=auth)
        seen["http"] = answer.json()
        failures = seen.setdefault("failures", [])
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        for bad in ({"messages": []}, big):
            try:
                await call_model(state, bad)
            except openai.APIStatusError as exc:
                failures.append((exc.status_code, exc.body))
            async with httpx.AsyncClient(timeout=HANG_S) as http:
                answer = await http.post(config["base_url"] + "/chat/completions", json=bad, headers=auth)
            failures.append((answer.status_code, answer.json()["error"]))

    monkeypatch.setenv("V1_ENDPOINT_MAX_BODY_BYTES", "4096")
    state = await harness(mock, program, sampling_args=TOKENS).run({"prompt": "x"})
    in_process, over_http_ = seen["in_process"], seen["http"]
    assert state["error"] is None, state["error"]
    for answer in (in_process, over_http_):
        answer.pop("id"), answer.pop("created")
    assert in_process == over_http_
    assert in_process == json.loads(json.dumps(in_process))  # plain JSON, as read from text
    assert in_process["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"
    assert in_process["prompt_token_ids"] and in_process["choices"][0]["token_ids"]
    statuses = [status for status, _ in seen["failures"]]
    assert statuses == [400, 400, 413, 413]
    assert seen["failures"][0][1] == seen["failures"][1][1] and seen["failures"][2][1] == seen["failures"][3][1]


async def test_a_value_answered_in_process_shares_nothing_with_the_recorded_step(mock: MockModelServer) -> None:
    mock.script(Reply.tool("add", {"a": 1, "b": 2}))

    async def program(task: vf.Task, state: vf.State) -> None:
        answer = await call_model(state, {"messages": USER})
        choice = answer["choices"][0]
        choice["token_ids"].append(-1)
        answer["prompt_token_ids"].clear()
        choice["message"]["tool_calls"][0]["function"]["name"] = "changed"
        choice["logprobs"]["content"].clear()
        answer["usage"]["completion_tokens"] = -1

    state = await harness(mock, program, sampling_args=TOKENS).run({"prompt": "x"})
    [step] = state["trajectory"]
    assert -1 not in step["tokens"]["completion_ids"] and step["tokens"]["prompt_ids"]
    assert step["completion"][0]["tool_calls"][0]["function"]["name"] == "add"
    assert len(step["tokens"]["completion_logprobs"]) == len(step["tokens"]["completion_ids"])
    assert step["response"]["usage"]["completion_tokens"] > 0


async def test_an_own_call_handed_over_with_its_value_is_checked_and_kept_as_the_bytes_would_be(mock: MockModelServer) -> None:
    """`call_model` hands over the value its bytes read as, so the endpoint does not read them again: the step
    is the one the bytes alone give, the program's later changes to its messages do not reach it, and a value
    nested past the bounded reader's depth is refused as its bytes are."""
    from v1._util.bounded_json import MAX_DEPTH
    from v1._util.json_check import compact_json_read
    from v1.programs import call_model

    mock.script(Reply.text("one"), Reply.text("two"))
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        messages = [dict(message) for message in USER]
        seen["answer"] = await call_model(state, {"messages": messages})
        messages[0]["content"] = "changed after the call"
        access = state.runtime.endpoint
        deep: Any = "x"
        for _ in range(MAX_DEPTH):
            deep = [deep]
        body, read = compact_json_read({"model": "m", "messages": USER, "metadata": deep})
        assert read is not None
        seen["deep"] = await access.own_call("/chat/completions", access.api_key, body, read)
        seen["deep bytes"] = await access.own_call("/chat/completions", access.api_key, body)

    state = await harness(mock, program).run({"prompt": "x"})
    assert state["error"] is None, state["error"]
    assert seen["answer"]["choices"][0]["message"]["content"] == "one"
    [step] = state["trajectory"]
    assert step["prompt"] == USER and step["completion"][0]["content"] == "one"
    deep, deep_bytes = seen["deep"], seen["deep bytes"]
    assert deep.status == deep_bytes.status == 400
    assert json.loads(deep.body) == json.loads(deep_bytes.body)
    assert "nested more than" in json.loads(deep.body)["error"]["message"]
    assert len(mock.requests) == 1


async def test_own_calls_are_handed_over_with_the_rollouts_key_and_checked_as_requests(mock: MockModelServer) -> None:
    """`call_model` on the endpoint's loop hands its bytes and key to the endpoint (`EndpointAccess.own_call`):
    a wrong key, a body that is no JSON and a stale key (the program's, after its phase) get the answers a
    request over HTTP gets; a route that is no model call is declined (None), for the carrier to post."""
    mock.script(Reply.text("one"), Reply.text("two"))
    seen: dict[str, Any] = {}
    body = json.dumps({"model": "m", "messages": USER}).encode()

    async def program(task: vf.Task, state: vf.State) -> None:
        access = state.runtime.endpoint
        assert access is not None and access.own_call is not None
        seen["access"] = access
        seen["answer"] = await access.own_call("/chat/completions", access.api_key, body)
        seen["wrong key"] = await access.own_call("/chat/completions", access.api_key + "x", body)
        seen["no json"] = await access.own_call("/chat/completions", access.api_key, b"{not json")
        seen["no model call"] = await access.own_call("/models", access.api_key, body)
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            wrong = await http.post(access.base_url + "/chat/completions", content=body, headers={"Authorization": "Bearer x"})
        seen["wrong key over http"] = wrong.json()

    async def after_the_program(task: vf.Task, state: vf.State) -> None:
        stale = seen["access"]
        seen["stale"] = await stale.own_call("/chat/completions", stale.api_key, body)
        current = state.runtime.endpoint
        seen["current"] = await current.own_call("/chat/completions", current.api_key, body)

    state = await harness(mock, program, updates=[after_the_program]).run({"prompt": "x"})
    assert state["error"] is None, state["error"]
    answer = seen["answer"]
    assert answer.status == 200 and answer.body == b"" and answer.value["choices"][0]["message"]["content"] == "one"
    wrong_key, no_json = seen["wrong key"], seen["no json"]
    assert wrong_key.status == 401 and json.loads(wrong_key.body)["error"] == seen["wrong key over http"]["error"]
    assert no_json.status == 400 and json.loads(no_json.body)["error"]["code"] == "invalid_json"
    assert seen["no model call"] is None
    assert seen["stale"].status == 401  # the program's key died with its phase
    assert seen["current"].status == 200 and seen["current"].value["choices"][0]["message"]["content"] == "two"
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["one"]  # the framework's own call is no step
