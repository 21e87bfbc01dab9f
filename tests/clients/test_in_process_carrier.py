"""One in-process carrier (`v1.clients`): every v1 caller sends through it, and it answers as loopback HTTP does.

A second way into a server of this process (a branch in a client that hands it the body, a
helper that calls the handler) would skip the recorder registered in front of that server
here, or answer differently from the same request over a socket; each test would then fail.
Real parts only: the interception endpoint of a harness run, `MockModelServer` over HTTP as
the upstream, the wire and the SDK clients v1 hands to programs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients._in_process import serve_in_process, served_in_process, stop_serving
from v1.clients._openai_wire import OpenAIWire
from v1.programs import call_model
from v1.testing import MockModelServer, Reply

USER = [{"role": "user", "content": "hello"}]
VOLATILE = ("id", "created")


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


class Recorder:
    """An in-process app put in front of what served an origin: notes each request's path, then hands it on.

    With nothing behind it, it declines, and the request goes over the network.
    """

    def __init__(self, behind: Any) -> None:
        self.behind = behind
        self.paths: list[str] = []

    async def handle_async_request(self, request: Any) -> Any:
        self.paths.append(request.url.path)
        return None if self.behind is None else await self.behind.handle_async_request(request)


def harness(mock: MockModelServer, program: Any) -> vf.Harness:
    return vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", max_turns=20)


async def test_every_caller_sends_through_the_one_carrier(mock: MockModelServer) -> None:
    mock.script(*[Reply.text("ok")] * 3)
    upstream = Recorder(None)  # in front of the mock's origin: the wire's posts and streams pass it, then leave
    endpoint: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        url = state.get_endpoint_config()["base_url"]
        endpoint["app"] = served_in_process(url)
        endpoint["recorder"] = recorder = Recorder(endpoint["app"])
        serve_in_process(url, recorder)
        try:
            await call_model(state, {"messages": USER})  # the base loop's call
            await state.get_client().chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            stream = await state.get_client().chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
            assert [chunk async for chunk in stream]
        finally:
            serve_in_process(url, endpoint["app"])

    serve_in_process(mock.url, upstream)
    try:
        state = await harness(mock, program).run({"prompt": "x"})
    finally:
        stop_serving(mock.url, upstream)
    assert state["error"] is None
    assert endpoint["app"] is not None, "the endpoint serves its origin in process"
    assert [path.rsplit("/v1", 1)[1] for path in endpoint["recorder"].paths] == ["/chat/completions"] * 3
    assert upstream.paths == ["/v1/chat/completions"] * 3, "the upstream client's calls all went through the carrier"
    assert len(state["trajectory"]) == 3


def without_volatile(value: Any) -> Any:
    """`value` without the fields each answer makes anew (ids, timestamps), at every depth."""
    return json.loads(json.dumps(value), object_hook=lambda fields: {k: v for k, v in fields.items() if k not in VOLATILE})


async def outcome(call: Any) -> Any:
    """What a caller of the wire sees: the answer without its ids, or the SDK error's class, status, message and body."""
    try:
        return without_volatile(await call)
    except openai.APIStatusError as exc:
        return type(exc), exc.status_code, str(exc), exc.body


async def test_the_same_requests_answer_alike_in_process_and_over_loopback(mock: MockModelServer) -> None:
    mock.script(*[Reply.text("same")] * 4)
    seen: dict[str, list[Any]] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        loopback = config["base_url"].replace("127.0.0.1", "localhost")  # another origin: nothing serves it in process
        assert served_in_process(config["base_url"]) is not None and served_in_process(loopback) is None
        for name, url in (("in_process", config["base_url"]), ("loopback", loopback)):
            wire = OpenAIWire(
                url, {"Authorization": f"Bearer {config['api_key']}"}, timeout=HANG_S, connect_timeout=HANG_S, max_connections=4
            )
            wrong_key = OpenAIWire(
                url, {"Authorization": "Bearer v1-wrong"}, timeout=HANG_S, connect_timeout=HANG_S, max_connections=4
            )
            try:
                stream = await wire.stream("/chat/completions", {"model": "m", "messages": USER, "stream": True})
                events = [without_volatile(event) async for event in stream]
                await stream.close()
                seen[name] = [
                    await outcome(wire.post("/chat/completions", {"model": "m", "messages": USER})),
                    events,
                    await outcome(wire.post("/chat/completions", {"model": "m", "messages": "not a list"})),
                    await outcome(wrong_key.post("/chat/completions", {"model": "m", "messages": USER})),
                    await outcome(wire.post("/no/such/route", {})),
                ]
            finally:
                await wire.close()
                await wrong_key.close()

    state = await harness(mock, program).run({"prompt": "x"})
    assert state["error"] is None
    assert seen["in_process"] == seen["loopback"]
    answer, events, bad_request, unauthorized, unknown = seen["in_process"]
    assert answer["choices"][0]["message"]["content"] == "same"
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices")) == "same"
    assert [failure[:2] for failure in (bad_request, unauthorized, unknown)] == [
        (openai.BadRequestError, 400),
        (openai.AuthenticationError, 401),
        (openai.NotFoundError, 404),
    ]
    assert len(state["trajectory"]) == 4, "both carriers' calls were recorded"
