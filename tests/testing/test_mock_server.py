"""`v1.testing.MockModelServer` over real HTTP: scripting, responders, delays, failures, streaming, tokens, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply, echo, mock_token_ids


def chat(server: MockModelServer, content: str = "hello", **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": content}], **body},
        timeout=HANG_S,
    )


def text_of(response: httpx.Response) -> str | None:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


# -- replies ----------------------------------------------------------------------------------------


def test_echo_is_the_default(mock: MockModelServer) -> None:
    assert mock.url == f"http://127.0.0.1:{mock.port}/v1" and mock.port != 0
    assert text_of(chat(mock, "say this back")) == "say this back"
    response = httpx.post(
        f"{mock.url}/chat/completions",
        json={"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}]}]},
        timeout=HANG_S,
    )
    assert text_of(response) == "part one two"


def test_scripted_replies_in_order_then_the_responder() -> None:
    with MockModelServer("default reply") as server:
        server.script("first", Reply.text("second"))
        server.script(Reply.tool("lookup", {"q": "x"}))
        replies = [chat(server).json()["choices"][0] for _ in range(5)]
    assert [choice["message"]["content"] for choice in replies] == ["first", "second", None, "default reply", "default reply"]
    call = replies[2]["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}
    assert [choice["finish_reason"] for choice in replies] == ["stop", "stop", "tool_calls", "stop", "stop"]


def test_reply_object_as_responder() -> None:
    with MockModelServer(Reply.text("always this", finish_reason="length")) as server:
        choices = [chat(server).json()["choices"][0] for _ in range(2)]
    assert [(c["message"]["content"], c["finish_reason"]) for c in choices] == [("always this", "length")] * 2


def test_sync_callable_responder() -> None:
    seen: list[MockRequest] = []

    def responder(request: MockRequest) -> Reply:
        seen.append(request)
        return Reply.text(request.last_user_text.upper())

    with MockModelServer(responder) as server:
        assert text_of(chat(server, "shout")) == "SHOUT"
        assert text_of(chat(server, "again")) == "AGAIN"
    assert [request.last_user_text for request in seen] == ["shout", "again"]
    assert seen[0].path == "/v1/chat/completions"


def test_async_callable_responder_returning_a_string() -> None:
    async def responder(request: MockRequest) -> str:
        await asyncio.sleep(0.01)
        return f"async:{len(request.messages)}"

    with MockModelServer(responder) as server:
        response = httpx.post(
            f"{server.url}/chat/completions",
            json={"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]},
            timeout=HANG_S,
        )
    assert text_of(response) == "async:2"


def test_scripted_callables_are_called_once() -> None:
    with MockModelServer() as server:
        server.script(lambda request: f"scripted:{request.last_user_text}")
        assert text_of(chat(server, "a")) == "scripted:a"
        assert text_of(chat(server, "b")) == "b"


def test_reply_helpers() -> None:
    reply = Reply.tool("add", {"a": 1}).and_tool("mul", '{"b": 2}')
    assert [(c["name"], c["arguments"]) for c in reply.tool_calls] == [("add", '{"a": 1}'), ("mul", '{"b": 2}')]
    assert len({c["id"] for c in reply.tool_calls}) == 2
    assert Reply.fail(429, "slow").status == 429 and Reply.fail().error == "mock failure"
    assert echo(MockRequest(path="/", body={"messages": [{"role": "user", "content": "hey"}]}, headers={})).content == "hey"
    assert mock_token_ids("a b  c") == [mock_token_ids(w)[0] for w in "a b c".split()]
    assert mock_token_ids("") == [0]
    assert all(0 <= t < 32000 for t in mock_token_ids("some longer text here"))


# -- delays and failures ------------------------------------------------------------------------------


def test_delay(mock: MockModelServer) -> None:
    mock.script(Reply.text("slow", delay=0.3))
    start = time.perf_counter()
    assert text_of(chat(mock)) == "slow"
    assert time.perf_counter() - start >= 0.3
    start = time.perf_counter()
    assert text_of(chat(mock, "fast")) == "fast"
    assert time.perf_counter() - start < 0.3


def test_delays_overlap_for_concurrent_requests() -> None:
    with MockModelServer(Reply.text("z", delay=0.3)) as server:
        start = time.perf_counter()
        threads = [threading.Thread(target=chat, args=(server,)) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
    assert len(server.requests) == 5
    assert 0.3 <= elapsed < 1.2  # served concurrently, not one after another


@pytest.mark.parametrize(
    ("status", "kind"),
    [(500, "server_error"), (503, "server_error"), (400, "invalid_request_error"), (401, "invalid_request_error")],
)
def test_failures_with_status(mock: MockModelServer, status: int, kind: str) -> None:
    mock.script(Reply.fail(status, f"failure {status}"))
    response = chat(mock)
    assert response.status_code == status
    assert response.json() == {"error": {"message": f"failure {status}", "type": kind, "code": None, "param": None}}
    assert text_of(chat(mock, "recovered")) == "recovered"


def test_failure_reaches_the_openai_sdk_as_its_error(mock: MockModelServer) -> None:
    mock.script(Reply.fail(500, "kaput"))
    client = openai.OpenAI(base_url=mock.url, api_key="k", max_retries=0)
    with pytest.raises(openai.InternalServerError, match="kaput"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    client.close()


def test_invalid_json_is_400(mock: MockModelServer) -> None:
    response = httpx.post(
        f"{mock.url}/chat/completions", content=b"{nope", headers={"Content-Type": "application/json"}, timeout=HANG_S
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "invalid JSON"
    assert mock.requests == []


# -- recording --------------------------------------------------------------------------------------------


def test_requests_are_recorded_and_reset(mock: MockModelServer) -> None:
    mock.script("queued", "never given")
    httpx.post(
        f"{mock.url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}], "temperature": 0.2},
        headers={"X-Custom": "yes"},
        timeout=HANG_S,
    )
    [request] = mock.requests
    assert request.body["temperature"] == 0.2
    assert request.tools == [{"type": "function"}]
    assert request.last_message == {"role": "user", "content": "hi"}
    assert {k.lower(): v for k, v in request.headers.items()}["x-custom"] == "yes"
    mock.reset()
    assert mock.requests == []
    assert text_of(chat(mock, "after reset")) == "after reset"  # the script was cleared too


def test_models_endpoint() -> None:
    with MockModelServer(model="my-mock") as server:
        response = httpx.get(f"{server.url}/models", timeout=HANG_S)
        completion = httpx.post(
            f"{server.url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}, timeout=HANG_S
        )
    assert [entry["id"] for entry in response.json()["data"]] == ["my-mock"]
    assert completion.json()["model"] == "my-mock"  # no model in the request: the server's own


def test_usage_counts_mock_tokens(mock: MockModelServer) -> None:
    body = chat(mock, "three little words").json()
    prompt = len(mock_token_ids("user: three little words"))
    assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
    assert body["id"] != chat(mock).json()["id"]


# -- streaming ----------------------------------------------------------------------------------------------

STREAM_TEXTS = [
    "hello",
    "Hello,  world!\n\n  indented line\twith tab ",
    "   leading spaces",
    "trailing newline\n",
    "   ",
    "unicode: naïve café — 你好",
]


def sse_events(response: httpx.Response) -> list[Any]:
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: ")
            data = block[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.parametrize("text", STREAM_TEXTS)
def test_stream_reassembles_to_the_non_streamed_content(text: str) -> None:
    with MockModelServer(Reply.text(text)) as server:
        plain = chat(server).json()
        events = sse_events(chat(server, stream=True))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    streamed = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert streamed == plain["choices"][0]["message"]["content"] == text
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert all("usage" not in chunk for chunk in chunks)


def test_stream_is_split_into_several_chunks() -> None:
    with MockModelServer(Reply.text("one two three")) as server:
        chunks = sse_events(chat(server, stream=True))[:-1]
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"][0]["delta"].get("content")]
    assert pieces == ["one ", "two ", "three"]


def test_stream_with_tool_calls_and_usage_through_the_sdk() -> None:
    reply = Reply.tool("add", {"a": 1}, content="calling add").and_tool("sub", {"b": 2})
    with MockModelServer() as server:
        server.script(reply, reply)
        client = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
        plain = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        client.close()
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [
        (d.index, d.id, d.function.name, d.function.arguments)
        for c in chunks
        if c.choices
        for d in c.choices[0].delta.tool_calls or []
    ]
    assert content == plain.choices[0].message.content == "calling add"
    assert calls == [
        (i, call.id, call.function.name, call.function.arguments)
        for i, call in enumerate(plain.choices[0].message.tool_calls or [])
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert plain.usage is not None
    assert chunks[-1].usage.model_dump() == plain.usage.model_dump()


def test_stream_carries_reasoning_content() -> None:
    reply = Reply.text("the answer is 4", reasoning_content="2 + 2 = 4")
    with MockModelServer() as server:
        server.script(reply, reply)
        plain = chat(server).json()["choices"][0]["message"]
        chunks = sse_events(chat(server, stream=True))[:-1]
    streamed = {
        field: "".join(chunk["choices"][0]["delta"].get(field) or "" for chunk in chunks)
        for field in ("reasoning_content", "content")
    }
    assert streamed == {"reasoning_content": plain["reasoning_content"], "content": plain["content"]}
    assert streamed["reasoning_content"] == "2 + 2 = 4"


# -- token ids and logprobs -----------------------------------------------------------------------------------


def test_token_ids_and_logprobs_only_when_asked(mock: MockModelServer) -> None:
    plain = chat(mock, "a b c").json()
    assert "prompt_token_ids" not in plain
    assert "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["logprobs"] is None

    only_logprobs = chat(mock, "a b c", logprobs=True).json()
    assert "prompt_token_ids" not in only_logprobs and "token_ids" not in only_logprobs["choices"][0]
    content = only_logprobs["choices"][0]["logprobs"]["content"]
    assert [item["token"] for item in content] == [f"token_id:{t}" for t in mock_token_ids("a b c")]
    assert [item["logprob"] for item in content] == pytest.approx([-0.01, -0.02, -0.03])

    only_ids = chat(mock, "a b c", return_token_ids=True).json()
    assert only_ids["choices"][0]["logprobs"] is None
    assert only_ids["prompt_token_ids"] == mock_token_ids("user: a b c")
    assert only_ids["choices"][0]["token_ids"] == mock_token_ids("a b c")


def test_scripted_token_ids_and_logprobs(mock: MockModelServer) -> None:
    mock.script(Reply.text("whatever", completion_ids=[7, 8], logprobs=[-0.5, -1.5]))
    body = chat(mock, logprobs=True, return_token_ids=True).json()
    choice = body["choices"][0]
    assert choice["token_ids"] == [7, 8]
    assert [item["logprob"] for item in choice["logprobs"]["content"]] == [-0.5, -1.5]
    assert body["usage"]["completion_tokens"] == 2


def test_tool_call_token_ids_come_from_the_arguments(mock: MockModelServer) -> None:
    mock.script(Reply.tool("f", {"x": 1}))
    choice = chat(mock, return_token_ids=True).json()["choices"][0]
    assert choice["token_ids"] == mock_token_ids('{"x": 1}')


# -- lifecycle -------------------------------------------------------------------------------------------------


async def test_async_context_manager() -> None:
    async with MockModelServer("from async") as server:
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            response = await http.post(f"{server.url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        port = server.port
    assert text_of(response) == "from async"
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={"messages": []}, timeout=2)


def test_stop_closes_the_port_and_start_is_idempotent() -> None:
    server = MockModelServer()
    assert server.start() is server
    assert server.start() is server
    port = server.port
    assert text_of(chat(server, "up")) == "up"
    server.stop()
    server.stop()  # a second stop is harmless
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)


def test_fixed_port_in_use_fails_to_start(mock: MockModelServer) -> None:
    with pytest.raises(OSError):
        MockModelServer(port=mock.port).start()


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The first stdout line, or a failure (not a hang) when none comes in time."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            pytest.fail(f"no URL printed within {timeout} s")
    return process.stdout.readline().strip()


def test_cli_prints_its_url_and_answers() -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # it must flush by itself
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.testing", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        line = read_line(process, timeout=HANG_S)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", line), line
        response = httpx.post(
            f"{line}/chat/completions", json={"messages": [{"role": "user", "content": "ping over cli"}]}, timeout=HANG_S
        )
        assert text_of(response) == "ping over cli"
        stream = httpx.post(
            f"{line}/chat/completions", json={"messages": [{"role": "user", "content": "a b"}], "stream": True}, timeout=HANG_S
        )
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in sse_events(stream)[:-1]) == "a b"
    finally:
        process.terminate()
        returncode = process.wait(timeout=HANG_S)
    assert returncode == 0  # SIGTERM stops it cleanly


def test_speaks_responses_messages_and_completions_streaming_too() -> None:
    reply = Reply.tool("add", {"a": 1}, content="Adding.", reasoning_content="hmm")
    with MockModelServer(
        lambda request: reply if request.tools else Reply.text(f"{request.dialect}: {request.last_user_text}")
    ) as server:
        oa = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
        with oa.responses.stream(model="m", input="hi") as events:
            assert events.get_final_response().output_text == "responses: hi"
        tool = {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}, "strict": False}
        answer = oa.responses.create(model="m", input="hi", tools=[tool])  # type: ignore[list-item]
        assert [item.type for item in answer.output] == ["reasoning", "message", "function_call"]
        chunks = oa.completions.create(model="m", prompt="a b", stream=True)
        assert "".join(chunk.choices[0].text for chunk in chunks) == "completions: a b"
        oa.close()
        an = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="k", max_retries=0)
        with an.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "yo"}]) as stream:
            assert stream.get_final_text() == "messages: yo"
        message = an.messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "yo"}],
            tools=[{"name": "add", "input_schema": {"type": "object"}}],
        )
        assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
        assert message.stop_reason == "tool_use"
        an.close()
    assert [r.dialect for r in server.requests] == ["responses", "responses", "completions", "messages", "messages"]
