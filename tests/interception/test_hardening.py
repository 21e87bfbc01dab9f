"""A program is untrusted input: what it can and cannot do to the upstream request, the state and the endpoint.

Real endpoint, real mock upstream over HTTP, real SDKs; programs run through `Harness.run`.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import socket
import types
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import Client
from v1.interception import EndpointServer, RolloutSession
from v1.testing import MockModelServer, Reply

UPSTREAM_KEY = "sk-upstream-secret-0123456789"
A = [{"role": "user", "content": "prompt A"}]
B = [{"role": "user", "content": "prompt B"}]


@pytest.fixture
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("V1_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    return "V1_TEST_UPSTREAM_KEY"


def harness(mock: MockModelServer, program: Any, key_var: str, **kwargs: Any) -> vf.Harness:
    config = kwargs.pop("client", None) or vf.ClientConfig(api_base_url=mock.url, api_key_var=key_var, max_retries=0)
    return vf.Harness(program=program, client=config, model="harness-model", **kwargs)


# -- item 3: the upstream request is built from what the dialect defines --------------------------


async def test_a_program_cannot_rewrite_the_upstream_request(mock: MockModelServer, upstream_key: str) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        await client.chat.completions.create(
            model="program-model",
            messages=A,  # type: ignore[arg-type]
            temperature=1.9,
            max_completion_tokens=100000,
            extra_body={  # the SDK merges these into the body's top level
                "model": "evil-model",
                "top_k": 50,
                "timeout": 0.000001,
                "extra_headers": {"Authorization": "Bearer stolen"},
                "extra_query": {"leak": "1"},
                "extra_body": {"messages": B, "model": "evil-model", "temperature": 1.9},
                "min_p": 0.5,
            },
            extra_headers={"Authorization-Extra": "x", "X-Evil": "1"},
            extra_query={"leak": "1"},
        )

    sampling = {"temperature": 0.3, "max_tokens": 64, "extra_body": {"top_k": 5}}
    state = await harness(mock, program, upstream_key, sampling_args=sampling).run({"prompt": "x"})
    assert state["error"] is None
    (sent,) = mock.requests
    assert sent.body["model"] == "harness-model"
    assert sent.body["messages"] == A
    assert sent.body["temperature"] == 0.3 and sent.body["top_k"] == 5 and sent.body["max_tokens"] == 64
    assert "max_completion_tokens" not in sent.body, "the harness's max_tokens overrides the program's alias too"
    assert sent.body["min_p"] == 0.5, "a sampling param the harness does not set stays the program's"
    assert not {"timeout", "extra_headers", "extra_query", "extra_body"} & set(sent.body)
    headers = {key.lower(): value for key, value in sent.headers.items()}
    assert headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert "x-evil" not in headers and "authorization-extra" not in headers
    assert sent.query == ""
    (step,) = state["trajectory"]
    assert step["prompt"] == A and step["completion"][0]["content"] == "prompt A", "the step records what was sent"


@pytest.mark.parametrize("api", ["completions", "responses"])
async def test_a_top_level_messages_key_does_not_replace_the_prompt(mock: MockModelServer, upstream_key: str, api: str) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config(api)
        body: dict[str, Any] = {"model": "m", "messages": B, "model_override": "x"}
        body.update({"prompt": "prompt A"} if api == "completions" else {"input": "prompt A"})
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answer = await http.post(
                f"{config['base_url']}/{api}", json=body, headers={"Authorization": f"Bearer {config['api_key']}"}
            )
        answer.raise_for_status()

    state = await harness(mock, program, upstream_key).run({"prompt": "x"})
    assert state["error"] is None
    (sent,) = mock.requests
    assert sent.last_user_text == "prompt A"
    assert "model_override" not in sent.body
    assert state["trajectory"][0]["completion"][0]["content"] == "prompt A"


# -- item 4: the upstream client and key are out of a program's reach ----------------------------

_OPAQUE = (asyncio.AbstractEventLoop, asyncio.Future, asyncio.Handle, types.ModuleType, type, socket.socket)


def reachable(*roots: Any, limit: int = 300_000) -> Iterator[tuple[Any, str]]:
    """Every object reachable from `roots` through attributes, items, bound methods, partials and closures.

    The event loop, futures and modules are not followed: in-process code shares those with the
    framework by nature (docs/harness.md says what is isolated per program form).
    """
    seen: set[int] = set()
    queue: list[tuple[Any, str]] = [(root, f"root{i}") for i, root in enumerate(roots)]
    while queue and len(seen) < limit:
        obj, path = queue.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE) or isinstance(obj, (int, float, bool, bytes, type(None))):
            continue
        seen.add(id(obj))
        yield obj, path
        if isinstance(obj, str):
            continue
        children: list[tuple[Any, str]] = []
        if isinstance(obj, dict):
            children += [(k, f"{path}.key") for k in obj] + [(v, f"{path}[{k!r}]") for k, v in obj.items()]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children += [(v, f"{path}[]") for v in obj]
        if isinstance(obj, types.MethodType):
            children.append((obj.__self__, f"{path}.__self__"))
        if isinstance(obj, functools.partial):
            children += [(obj.func, f"{path}.func"), (obj.args, f"{path}.args"), (obj.keywords, f"{path}.keywords")]
        if isinstance(obj, types.FunctionType):
            children += [(cell.cell_contents, f"{path}.<closure>") for cell in obj.__closure__ or () if _filled(cell)]
            children.append((obj.__defaults__, f"{path}.__defaults__"))
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            children += [(v, f"{path}.{k}") for k, v in attributes.items()]
        for slot in getattr(type(obj), "__slots__", ()) if not isinstance(obj, (dict, list, tuple)) else ():
            if isinstance(slot, str) and hasattr(obj, slot):
                children.append((getattr(obj, slot), f"{path}.{slot}"))
        queue += children


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


async def test_nothing_a_program_holds_leads_to_the_upstream(mock: MockModelServer, upstream_key: str) -> None:
    found: list[str] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=A)  # type: ignore[arg-type]
        roots = (state, task, state.get_client(), state.get_client("messages"), state.get_tools(), state.get_endpoint_config())
        for obj, path in reachable(*roots):
            if isinstance(obj, (Client, RolloutSession, EndpointServer)):
                found.append(f"{type(obj).__name__} at {path}")
            elif isinstance(obj, str) and UPSTREAM_KEY in obj:
                found.append(f"the upstream key at {path}")

    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    state = await harness(mock, program, upstream_key, toolsets=[vf.Toolset(tools=[double])]).run({"prompt": "x"})
    assert state["error"] is None and len(state["trajectory"]) == 1
    assert found == []
    assert not hasattr(state.runtime, "client") and not hasattr(state.runtime, "session")


# -- item 5: a request the upstream refuses is the program's 4xx, not a retried 502 -----------------


@pytest.mark.parametrize("api", ["chat_completions", "messages"])
async def test_an_upstream_4xx_reaches_the_program_in_its_dialect_and_is_not_retried(
    mock: MockModelServer, upstream_key: str, api: str
) -> None:
    mock.script(Reply.fail(400, "max_tokens: must be >= 1"), Reply.text("never asked"))
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config(api)
        path = "/v1/messages" if api == "messages" else "/chat/completions"
        body = {"model": "m", "max_tokens": -1, "messages": A}
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answer = await http.post(config["base_url"] + path, json=body, headers={"x-api-key": config["api_key"]})
        seen["status"], seen["body"] = answer.status_code, answer.json()

    config = vf.ClientConfig(api_base_url=mock.url, api_key_var=upstream_key, max_retries=3)
    state = await harness(mock, program, upstream_key, client=config).run({"prompt": "x"})
    assert seen["status"] == 400
    if api == "messages":
        assert seen["body"]["type"] == "error" and seen["body"]["error"]["type"] == "invalid_request_error"
        message = seen["body"]["error"]["message"]
    else:
        assert seen["body"]["error"]["code"] == "upstream_rejected_request"
        message = seen["body"]["error"]["message"]
    assert "max_tokens: must be >= 1" in message
    assert len(mock.requests) == 1, "the program's own bad request is not retried"
    assert state["error"]["type"] == "ModelRequestError"
    assert f"127.0.0.1:{mock.port}" not in json.dumps(seen["body"])


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"messages": [{"role": "user", "content": "a"}], "temperature": NaN}', id="nan"),
        pytest.param(b'{"messages": [{"role": "user", "content": "a"}], "max_tokens": Infinity}', id="infinity"),
        pytest.param(b'{"messages": [{"role": "user", "content": "\\ud800"}]}', id="lone-surrogate"),
    ],
)
async def test_values_no_upstream_could_read_are_refused_at_the_endpoint(
    mock: MockModelServer, upstream_key: str, raw: bytes
) -> None:
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answer = await http.post(
                config["base_url"] + "/chat/completions",
                content=raw,
                headers={"Authorization": f"Bearer {config['api_key']}", "Content-Type": "application/json"},
            )
        seen["status"], seen["body"] = answer.status_code, answer.json()

    state = await harness(mock, program, upstream_key).run({"prompt": "x"})
    assert seen["status"] == 400 and seen["body"]["error"]["code"] == "invalid_json"
    assert mock.requests == [] and state["error"] is None


async def test_an_upstream_failure_never_names_the_upstream(upstream_key: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        try:
            await state.get_client().chat.completions.create(model="m", messages=A)  # type: ignore[arg-type]
        except openai.APIStatusError as exc:
            seen["status"], seen["text"] = exc.status_code, exc.response.text

    config = vf.ClientConfig(api_base_url=f"http://127.0.0.1:{dead_port}/v1", api_key_var=upstream_key, max_retries=0)
    state = await vf.Harness(program=program, client=config, model="m").run({"prompt": "x"})
    assert seen["status"] == 502
    assert str(dead_port) not in seen["text"] and "127.0.0.1" not in seen["text"]
    assert state["error"]["type"] == "ModelError"


# -- item 6: hostile bodies get a 4xx in the dialect's shape ----------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE = [
    pytest.param("/chat/completions", DEEP, {}, id="chat-deep-nesting"),
    pytest.param("/v1/messages", DEEP, {}, id="messages-deep-nesting"),
    pytest.param("/responses", b'{"model": "m", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}", {}, id="responses-deep-input"),
    pytest.param("/chat/completions", b'{"messages": [{"role": {"a": 1}, "content": "x"}]}', {}, id="chat-role-object"),
    pytest.param("/chat/completions", b'{"messages": [{"role": ["user"], "content": "x"}]}', {}, id="chat-role-list"),
    pytest.param(
        "/responses",
        b'{"model": "m", "input": [{"role": "user", "content": [{"type": {"x": 1}, "text": "a"}]}]}',
        {},
        id="responses-part-type-object",
    ),
    pytest.param(
        "/responses",
        b'{"model": "m", "input": [{"type": ["message"], "role": "user", "content": "a"}]}',
        {},
        id="responses-item-type-list",
    ),
    pytest.param(
        "/v1/messages",
        b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": {"t": 1}}]}]}',
        {},
        id="messages-block-type-object",
    ),
    pytest.param(
        "/v1/messages",
        b'{"model": "m", "max_tokens": 5, "messages": [{"role": {"r": 1}, "content": "a"}]}',
        {},
        id="messages-role-object",
    ),
    pytest.param("/chat/completions", json.dumps({"messages": A}).encode(), {"Content-Encoding": "gzip"}, id="gzip-not-gzipped"),
    pytest.param("/v1/messages", b"\x78\x9cnot deflate at all", {"Content-Encoding": "deflate"}, id="deflate-garbage"),
    pytest.param("/chat/completions", gzip.compress(b'{"messages": ['), {"Content-Encoding": "gzip"}, id="gzip-of-broken-json"),
    pytest.param("/completions", zlib.compress(b"\xff\xfe"), {"Content-Encoding": "deflate"}, id="deflate-not-utf8"),
]


@pytest.mark.parametrize(("route", "raw", "headers"), HOSTILE)
async def test_hostile_bodies_get_a_4xx_in_the_dialects_shape(
    mock: MockModelServer, upstream_key: str, route: str, raw: bytes, headers: dict[str, str]
) -> None:
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config("messages" if route == "/v1/messages" else "chat_completions")
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            answer = await http.post(
                config["base_url"] + route,
                content=raw,
                headers={"x-api-key": config["api_key"], "Content-Type": "application/json", **headers},
            )
        seen["status"], seen["body"] = answer.status_code, answer.json()

    state = await harness(mock, program, upstream_key).run({"prompt": "x"})
    assert 400 <= seen["status"] < 500, seen
    if route == "/v1/messages":
        assert seen["body"]["type"] == "error" and seen["body"]["error"]["type"] == "invalid_request_error"
    else:
        assert seen["body"]["error"]["type"] == "invalid_request_error"
    assert mock.requests == [] and state["error"] is None
