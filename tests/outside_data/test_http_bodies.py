"""HTTP bodies a program sends are outside data: bounded in time, depth and numbers, and judged by status, not text.

E2: one rollout's slow-body connections must not starve another rollout. E4 and V1: ``1e999``,
200,000-deep bodies and a 2**200 seed get a 400 in the dialect's error shape (the endpoint and
`v1 serve`). E3: an upstream error that *echoes* "AuthenticationError" stops no run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S, arrives
from v1.cli import main
from v1.interception import _connection_gate as connection_gate
from v1.interception import _server as endpoint_server
from v1.testing import MockModelServer, MockRequest, Reply, reverser

ROOT = Path(__file__).resolve().parents[2]
DEEP = b"[" * 200_000 + b"]" * 200_000
SLOW_BODY_CONNECTIONS = 64


async def open_slow_bodies(url: str, key: str, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """`count` raw connections, each a request head announcing 100,000 body bytes and then one byte of it."""
    address = httpx.URL(url)
    head = (
        f"POST {address.raw_path.decode()}/chat/completions HTTP/1.1\r\nHost: {address.host}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{"
    ).encode()
    sockets = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(address.host, address.port)
        writer.write(head)
        await writer.drain()
        sockets.append((reader, writer))
    return sockets


async def test_one_rollouts_slow_bodies_leave_other_rollouts_their_calls(mock: MockModelServer, monkeypatch: Any) -> None:
    monkeypatch.setattr(endpoint_server, "connection_limit", lambda descriptors: 48)  # the gate, small enough to fill here
    monkeypatch.setattr(connection_gate, "PER_ROLLOUT_BUSY", 8, raising=False)
    monkeypatch.setattr(endpoint_server, "BODY_READ_TIMEOUT_S", HANG_S)  # the busy ones stay unanswered, however slow
    opened = asyncio.Event()
    finish = asyncio.Event()
    answered: list[bytes | None] = []

    async def slowloris(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        sockets = await open_slow_bodies(config["base_url"], config["api_key"], SLOW_BODY_CONNECTIONS)
        reads = [asyncio.ensure_future(reader.read(12)) for reader, _ in sockets]
        refusals = SLOW_BODY_CONNECTIONS - 8
        await arrives(lambda: sum(read.done() for read in reads) >= refusals, f"{refusals} connections refused")
        opened.set()
        await finish.wait()
        answered.extend(read.result() if read.done() else None for read in reads)
        for read in reads:
            read.cancel()
        for _, writer in sockets:
            writer.close()

    async def polite(task: vf.Task, state: vf.State) -> None:
        """One model call over TCP, as an agent CLI makes it."""
        await opened.wait()
        config = state.get_endpoint_config()
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        try:
            async with httpx.AsyncClient(timeout=HANG_S) as http:
                answer = await http.post(
                    config["base_url"] + "/chat/completions", json=body, headers={"Authorization": f"Bearer {config['api_key']}"}
                )
            state["answer_status"] = answer.status_code
        finally:
            finish.set()

    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    attacker = vf.Harness(client=client, model="m", program=slowloris)
    bystander = vf.Harness(client=client, model="m", program=polite)
    _, other = await asyncio.wait_for(asyncio.gather(attacker.run("x"), bystander.run("hello")), HANG_S)
    assert other["error"] is None, other["error"]
    assert other["answer_status"] == 200 and len(other["trajectory"]) == 1
    refused = [answer for answer in answered if answer is not None]
    assert len(refused) == SLOW_BODY_CONNECTIONS - 8  # all but the rollout's 8 busy connections, refused at once
    assert set(refused) == {b"HTTP/1.1 429"}


async def test_a_body_that_never_arrives_gets_408_and_its_connection_closed(mock: MockModelServer, monkeypatch: Any) -> None:
    monkeypatch.setattr(endpoint_server, "BODY_READ_TIMEOUT_S", 1.0, raising=False)
    answers: list[bytes] = []

    async def one_slow_body(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        [(reader, writer)] = await open_slow_bodies(config["base_url"], config["api_key"], 1)
        try:
            answers.append(await asyncio.wait_for(reader.read(), HANG_S))  # the whole answer, then EOF
        finally:
            writer.close()

    harness = vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", program=one_slow_body)
    state = await harness.run("x")
    assert state["error"] is None, state["error"]
    [answer] = answers
    assert answer.startswith(b"HTTP/1.1 408")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "body_timeout"


async def endpoint_answers(mock: MockModelServer, sends: list[tuple[str, dict[str, str], bytes]]) -> list[httpx.Response]:
    """What the endpoint answers a rollout's program for each (path, headers, raw body)."""
    answers: list[httpx.Response] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        root = config["base_url"].removesuffix("/v1")
        auth = {"Authorization": f"Bearer {config['api_key']}", "x-api-key": config["api_key"]}
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            for path, headers, body in sends:
                answers.append(await http.post(root + path, content=body, headers={**auth, **headers}))

    await vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", program=program).run("x")
    return answers


async def test_infinite_numbers_and_deep_bodies_get_a_400_in_the_dialects_shape(mock: MockModelServer) -> None:
    chat = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1e999}'
    messages = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "temperature": 1e999}'
    json_header = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    answers = await endpoint_answers(
        mock,
        [
            ("/v1/chat/completions", json_header, chat),
            ("/v1/messages", json_header, messages),
            ("/v1/chat/completions", json_header, DEEP),
        ],
    )
    assert [answer.status_code for answer in answers] == [400, 400, 400]
    openai_error = answers[0].json()["error"]
    assert openai_error["code"] == "invalid_json" and "1e999 is out of range" in openai_error["message"]
    anthropic_error = answers[1].json()
    assert anthropic_error["type"] == "error" and anthropic_error["error"]["type"] == "invalid_request_error"
    assert "nested more than 128 levels deep" in answers[2].json()["error"]["message"]
    assert mock.requests == []  # nothing reached the upstream


@pytest.fixture
async def tiny_server() -> AsyncIterator[Any]:
    from v1.inference import InferenceServer, build_tiny_model

    model, tokenizer = build_tiny_model({"seed": 1, "max_position_embeddings": 64})
    async with InferenceServer(model, tokenizer, model_name="tiny") as running:
        yield running


async def test_v1_serve_answers_hostile_bodies_with_a_400_in_openais_shape(tiny_server: Any) -> None:
    base = b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]'
    bodies = {
        "deep": DEEP,
        "infinite temperature": base + b', "temperature": 1e999}',
        "huge seed": base + b', "seed": ' + str(2**200).encode() + b"}",
    }
    async with httpx.AsyncClient(timeout=HANG_S) as http:
        answers = {name: await http.post(tiny_server.url + "/chat/completions", content=body) for name, body in bodies.items()}
        fine = await http.post(tiny_server.url + "/chat/completions", content=base + b"}")
    for name, answer in answers.items():
        assert answer.status_code == 400, (name, answer.status_code, answer.text[:200])
        assert answer.json()["error"]["type"] == "invalid_request_error", name
    assert answers["huge seed"].json()["error"]["param"] == "seed"
    assert fine.status_code == 200  # the server still serves


E3_AGENT = """
async def run(task, state):
    extra = {"reasoning_effort": "AuthenticationError"} if state["example_id"] == 0 else {}
    client = state.get_client()
    await client.chat.completions.create(model="m", messages=list(state["prompt"]), **extra)
"""


def echoing_refusal(request: MockRequest) -> Reply:
    """A provider that echoes a bad parameter's value in its 400, as real ones do."""
    effort = request.body.get("reasoning_effort")
    if effort is not None:
        return Reply.fail(400, f"Invalid value for 'reasoning_effort': {effort!r} (Error code: 404 is not it either)")
    return reverser(request)


def test_an_upstream_400_that_echoes_authenticationerror_stops_no_run(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "e3_agent.py").write_text(E3_AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    out = tmp_path / "out"
    config = (ROOT / "configs" / "reverse_text.toml").read_text() + '\nprogram = { fn = "e3_agent:run" }\n'
    (tmp_path / "e3.toml").write_text(config)
    with MockModelServer(echoing_refusal, model="m") as mock:
        args = ["eval", str(tmp_path / "e3.toml"), "-m", "m", "-b", mock.url, "-n", "4", "-r", "1", "--max-retries", "0"]
        first = main([*args, "--output-dir", str(out), "--harness.client.max_retries", "0"])
        [run] = [path for path in out.rglob("metadata.json")]
        lines = [json.loads(line) for line in (run.parent / "results.jsonl").read_text().splitlines()]
        resumed = main(["eval", "--resume", str(run.parent), "-b", mock.url])
    assert first != 3 and resumed != 3  # 3: a fatal upstream error stopped the run
    assert sorted(line["example_id"] for line in lines) == [0, 1, 2, 3]
    by_example = {line["example_id"]: line for line in lines}
    assert by_example[0]["error"]["status"] == 400 and "AuthenticationError" in by_example[0]["error"]["message"]
    assert all(by_example[i]["error"] is None for i in (1, 2, 3))  # the other rollouts finished
