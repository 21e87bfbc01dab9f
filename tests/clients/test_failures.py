"""Upstream failures in every client type: truncated streams, malformed answers, resets, 5xx, 429, timeouts, 4xx.

Each client talks to the mock model server over real HTTP through its real SDK; the
endpoint's streaming path calls `stream_response`, its plain path `get_response`.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.clients import resolve_client
from v1.clients._base import RETRY_AFTER_MAX, backoff_seconds
from v1.testing import MockModelServer, Reply
from v1.types import Response

CLIENT_TYPES = [
    "openai_chat_completions",
    "openai_completions",
    "openai_chat_completions_token",
    "openai_responses",
    "anthropic_messages",
]
PROMPT: Any = [{"role": "user", "content": "say something"}]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("v1.clients._base.RETRY_WAIT_INITIAL", 0.001)


def prompt_for(client_type: str) -> Any:
    return "say something" if client_type == "openai_completions" else PROMPT


async def make_client(mock: MockModelServer, client_type: str, **config: Any) -> Any:
    config.setdefault("max_retries", 1)
    return await resolve_client(vf.ClientConfig(client_type=client_type, api_base_url=mock.url, **config))


async def streamed(client: Any, client_type: str, **kwargs: Any) -> tuple[list[Any], Response]:
    deltas: list[Any] = []
    final: Response | None = None
    async for item in client.stream_response(prompt_for(client_type), "m", {}, **kwargs):
        if isinstance(item, Response):
            final = item
        else:
            deltas.append(item)
    assert final is not None
    return deltas, final


SDK_DEFAULT_S = 600.0  # the openai SDK's read timeout when none reaches it

STREAMING_UPSTREAMS = ["openai_chat_completions", "openai_responses", "anthropic_messages"]
"""The client types that stream from the upstream; the others answer a streaming call from a whole answer."""

FAULTS = [
    # cut before the first delta (nothing relayed yet), so it can be asked again
    pytest.param(Reply.failing("truncated_stream", ""), "InvalidModelResponseError", id="truncated-before-a-delta"),
    pytest.param(Reply.failing("malformed_json"), "InvalidModelResponseError", id="malformed-json"),
    pytest.param(Reply.fail(503, "overloaded"), None, id="5xx"),
    pytest.param(Reply.fail(429, "slow down", retry_after=0.01), None, id="429-retry-after"),
    pytest.param(Reply.failing("reset"), None, id="reset"),
]


@pytest.mark.parametrize(("fault", "expected"), FAULTS)
@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("client_type", CLIENT_TYPES)
async def test_a_failed_answer_is_retried_in_both_paths(
    mock: MockModelServer, client_type: str, streaming: bool, fault: Reply, expected: str | None
) -> None:
    mock.script(fault, Reply.text("whole answer"))
    client = await make_client(mock, client_type)
    retried: list[str] = []
    if streaming:
        _, response = await streamed(client, client_type, on_retry=lambda exc: retried.append(type(exc).__name__))
    else:
        response = await client.get_response(
            prompt_for(client_type), "m", {}, on_retry=lambda exc: retried.append(type(exc).__name__)
        )
    assert response.message.content == "whole answer"
    assert len(mock.requests) == 2
    assert len(retried) == 1
    if expected is not None:
        assert retried == [expected]


@pytest.mark.parametrize("client_type", STREAMING_UPSTREAMS)
async def test_a_whole_json_body_answering_a_stream_is_retried(mock: MockModelServer, client_type: str) -> None:
    mock.script(Reply.failing("not_sse"), Reply.text("whole answer"))
    client = await make_client(mock, client_type)
    retried: list[str] = []
    _, response = await streamed(client, client_type, on_retry=lambda exc: retried.append(type(exc).__name__))
    assert response.message.content == "whole answer"
    assert retried == ["InvalidModelResponseError"]


@pytest.mark.parametrize(
    ("client_type", "fault"),
    [(client_type, "truncated_stream") for client_type in CLIENT_TYPES]
    + [(client_type, "not_sse") for client_type in STREAMING_UPSTREAMS],
)
async def test_an_incomplete_stream_is_never_a_complete_answer(mock: MockModelServer, client_type: str, fault: Any) -> None:
    mock.script(Reply.failing(fault, "one two three four five six"))
    client = await make_client(mock, client_type, max_retries=0)
    with pytest.raises(vf.InvalidModelResponseError):
        await streamed(client, client_type)


@pytest.mark.parametrize("client_type", STREAMING_UPSTREAMS)
async def test_a_stream_cut_after_relayed_deltas_fails_without_a_retry(mock: MockModelServer, client_type: str) -> None:
    mock.script(Reply.failing("truncated_stream", "one two three four five six seven eight"), Reply.text("never asked"))
    client = await make_client(mock, client_type, max_retries=3)
    deltas: list[Any] = []
    with pytest.raises(vf.InvalidModelResponseError):
        async for item in client.stream_response(prompt_for(client_type), "m", {}):
            deltas.append(item)
    assert deltas, "the cut stream carried deltas before it ended"
    assert len(mock.requests) == 1, "deltas were relayed: asking again would contradict them"


@pytest.mark.parametrize("client_type", CLIENT_TYPES)
async def test_a_request_refused_upstream_is_a_model_request_error_and_not_retried(
    mock: MockModelServer, client_type: str
) -> None:
    mock.script(Reply.fail(400, "max_tokens must be positive"), Reply.text("never asked"))
    client = await make_client(mock, client_type, max_retries=3)
    with pytest.raises(vf.ModelRequestError, match="max_tokens must be positive") as caught:
        await client.get_response(prompt_for(client_type), "m", {"max_tokens": -1})
    assert caught.value.status_code == 400
    assert len(mock.requests) == 1


@pytest.mark.parametrize("client_type", CLIENT_TYPES)
async def test_the_configured_timeout_is_the_read_timeout(mock: MockModelServer, client_type: str) -> None:
    # The SDK sends its own per-request timeout with every call; given a pool whose timeout equals httpx's
    # default (5 s everywhere, as ClientConfig(timeout=5) makes it), the openai SDK used its 600 s default.
    # The mock is on loopback, so the connect wait is at least 60 s (see test_config's loopback test).
    five = await make_client(mock, client_type, timeout=5.0, max_retries=0)
    assert (five.client.timeout.read, five.client.timeout.connect) == (5.0, 60.0)
    mock.script(Reply.hang())  # an hour: only the client's timeout ends the call
    client = await make_client(mock, client_type, timeout=0.5, connect_timeout=HANG_S, max_retries=0)
    assert (client.client.timeout.read, client.client.timeout.connect) == (0.5, HANG_S)
    started = time.monotonic()
    with pytest.raises(vf.ModelError, match=r"(?i)time"):
        await asyncio.wait_for(client.get_response(prompt_for(client_type), "m", {}), timeout=SDK_DEFAULT_S / 2)
    assert time.monotonic() - started < SDK_DEFAULT_S / 2  # not the SDK's 600 s default, however loaded the machine


def status_error(headers: dict[str, str]) -> Exception:
    error = Exception("429")
    error.response = httpx.Response(429, headers=headers)  # type: ignore[attr-defined]
    return error


def test_backoff_honours_retry_after_capped() -> None:
    assert backoff_seconds(0, status_error({"Retry-After": "7"})) == 7
    assert backoff_seconds(5, status_error({"retry-after-ms": "1500"})) == 1.5
    assert backoff_seconds(0, status_error({"Retry-After": "100000"})) == RETRY_AFTER_MAX
    date = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 < backoff_seconds(0, status_error({"Retry-After": date})) <= 20
    assert backoff_seconds(0, status_error({})) < 1  # no header: the exponential backoff
