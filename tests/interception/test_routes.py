"""Both carriers of the endpoint answer every route alike, from its one route table.

Each case goes once over real HTTP (aiohttp) and once through the in-process transport
(no socket), each carrier with a rollout of its own; upstream is a real `MockModelServer`.
Every route of the table must be hit by a case that expects it to answer, so a route
missing from the table (a 404 where a 200 was due) fails for both carriers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import InProcessTransport, http_library, resolve_client
from v1.interception import EndpointServer, get_endpoint, upstream
from v1.interception._lookup import DIALECTS
from v1.testing import MockModelServer

USER = [{"role": "user", "content": "hello"}]
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hello"}]}]}
# What differs between two identical calls: generated ids and clocks.
VOLATILE = re.compile(r'("(?:id|created|created_at|responseId|item_id|call_id|message_id)"\s*:\s*)("[^"]*"|\d+)')


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str  # under the rollout's /r/<id>
    status: int
    body: Any = None
    key: str | None = "right"  # "right", a literal wrong key, or None for none
    dialect: str | None = None  # the dialect whose route answers
    headers: dict[str, str] = field(default_factory=dict)


def dialect_cases() -> list[Case]:
    calls = {
        "chat_completions": ("/v1/chat/completions", {"model": "m", "messages": USER}),
        "completions": ("/v1/completions", {"model": "m", "prompt": "hello"}),
        "responses": ("/v1/responses", {"model": "m", "input": "hello"}),
        "messages": ("/v1/messages", {"model": "m", "max_tokens": 16, "messages": USER}),
    }
    cases = []
    for name, (path, body) in calls.items():
        cases.append(Case(f"{name}", "POST", path, 200, body, dialect=name))
        cases.append(Case(f"{name} stream", "POST", path, 200, {**body, "stream": True}, dialect=name))
        cases.append(Case(f"{name} wrong key", "POST", path, 401, body, key="v1-wrong", dialect=name))
        cases.append(Case(f"{name} no key", "POST", path, 401, body, key=None, dialect=name))
        cases.append(Case(f"{name} GET", "GET", path, 405, dialect=name))
        cases.append(Case(f"{name} bad json", "POST", path, 400, b"{not json", dialect=name))
    gemini = "/v1beta/models/m"
    cases += [
        Case("gemini", "POST", f"{gemini}:generateContent", 200, GEMINI_BODY, dialect="gemini"),
        Case("gemini stream", "POST", f"{gemini}:streamGenerateContent", 200, GEMINI_BODY, dialect="gemini"),
        Case("gemini wrong key", "POST", f"{gemini}:generateContent", 401, GEMINI_BODY, key="wrong", dialect="gemini"),
        Case("gemini GET", "GET", f"{gemini}:generateContent", 405, dialect="gemini"),
        Case("gemini unknown method", "POST", f"{gemini}:fly", 400, GEMINI_BODY, dialect="gemini"),
    ]
    return cases


CASES = [
    *dialect_cases(),
    Case("anthropic count_tokens", "POST", "/v1/messages/count_tokens", 200, {"model": "m", "messages": USER}),
    Case("anthropic count_tokens wrong key", "POST", "/v1/messages/count_tokens", 401, {"model": "m", "messages": USER}, "bad"),
    Case("anthropic count_tokens GET", "GET", "/v1/messages/count_tokens", 405),
    Case("gemini countTokens", "POST", "/v1beta/models/m:countTokens", 200, GEMINI_BODY),
    Case("models", "GET", "/v1/models", 200),
    Case("models POST", "POST", "/v1/models", 405, {}),
    Case("models wrong key", "GET", "/v1/models", 401, key="bad"),
    Case("mcp ping", "POST", "/mcp", 200, {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    Case("mcp tools/list", "POST", "/mcp", 200, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    Case("mcp notification", "POST", "/mcp", 202, {"jsonrpc": "2.0", "method": "notifications/initialized"}),
    Case("mcp wrong key", "POST", "/mcp", 401, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, key="bad"),
    Case("unknown under v1", "POST", "/v1/nothing", 404, {}),
    Case("unknown under v1beta", "POST", "/v1beta/nothing", 404, {}),
    Case("unknown rollout root", "GET", "", 404),
]


class RefuseOtherOrigins:
    """The in-process transport's fallback here: a request that would leave the process fails the test."""

    async def handle_async_request(self, request: Any) -> Any:
        raise AssertionError(f"{request.url} left the in-process carrier")

    async def aclose(self) -> None:
        return None


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


async def open_rollout(endpoint: EndpointServer, mock: MockModelServer) -> tuple[str, str]:
    state = vf.State.for_task({"prompt": "hi"})
    upstream(state).client = await resolve_client(vf.ClientConfig(api_base_url=mock.url, max_retries=0))
    state.runtime.model = "m"
    session = endpoint.open(state)
    return session.base_url.removesuffix("/v1"), session.api_key


def request_headers(case: Case, key: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **case.headers}
    if case.key is not None:
        headers["Authorization"] = f"Bearer {key if case.key == 'right' else case.key}"
    return headers


def content(case: Case) -> bytes | None:
    if case.body is None:
        return None
    return case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()


async def send_all(http: Any, root: str, key: str) -> dict[str, tuple[int, str]]:
    answers = {}
    for case in CASES:
        response = await http.request(case.method, root + case.path, content=content(case), headers=request_headers(case, key))
        text = response.text.replace(root, "ROOT").replace(urlsplit(root).path, "ROOT")
        answers[case.name] = (response.status_code, VOLATILE.sub(r"\1*", text))
    return answers


async def test_every_route_answers_alike_over_both_carriers(mock: MockModelServer) -> None:
    endpoint = await get_endpoint()
    assert endpoint.port is not None
    in_process = InProcessTransport(fallback=RefuseOtherOrigins())
    async with httpx.AsyncClient(timeout=HANG_S) as over_http, http_library().AsyncClient(transport=in_process) as over_process:
        answers = {
            "http": await send_all(over_http, *await open_rollout(endpoint, mock)),
            "in_process": await send_all(over_process, *await open_rollout(endpoint, mock)),
        }

    wrong = {
        carrier: {case.name: carried[case.name] for case in CASES if carried[case.name][0] != case.status}
        for carrier, carried in answers.items()
    }
    assert wrong == {"http": {}, "in_process": {}}, "unexpected statuses"
    assert answers["in_process"] == answers["http"]


def test_the_cases_cover_every_route_and_dialect() -> None:
    routes = EndpointServer().routes
    hit = set()
    for case in CASES:
        found = routes.find(f"/r/rollout{case.path}")
        assert (found is None) == (case.status == 404), case.name
        if found is not None and case.status < 400:
            hit.add(found[0].path)
    assert hit == {route.path for route in routes.routes}
    assert {case.dialect for case in CASES if case.dialect and case.status == 200} == set(DIALECTS)
    assert {case.status for case in CASES} >= {200, 202, 400, 401, 404, 405}
