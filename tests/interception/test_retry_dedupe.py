"""A client that retries by re-posting the same body after its own timeout, with no retry header (a raw HTTP
client, as agents built on `fetch` or `requests` do): one step, the same answer, not a forked trajectory."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

import v1 as vf
from v1.clients import resolve_client
from v1.interception import RolloutSession, get_endpoint, upstream
from v1.testing import MockModelServer, Reply

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]})


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


async def open_rollout(mock: MockModelServer) -> tuple[vf.State, RolloutSession]:
    endpoint = await get_endpoint()
    state = vf.State.for_task({"prompt": "hi"})
    upstream(state).client = await resolve_client(vf.ClientConfig(api_base_url=mock.url, max_retries=0))
    state.runtime.model = "m"
    return state, endpoint.open(state)


def post(session: RolloutSession, timeout: float | None = None) -> str | None:
    """One raw POST of BODY; None when the client gave up waiting (its connection closed)."""
    url = urlsplit(session.base_url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
    try:
        connection.request("POST", url.path + "/chat/completions", BODY, {"Authorization": f"Bearer {session.api_key}"})
        return str(json.loads(connection.getresponse().read())["choices"][0]["message"]["content"])
    except TimeoutError:
        return None
    finally:
        connection.close()


def retrying_client(session: RolloutSession, first_timeout: float, pause: float) -> list[str | None]:
    """Gives up on the first attempt after `first_timeout`, waits `pause`, re-posts the identical body."""
    first = post(session, timeout=first_timeout)
    time.sleep(pause)
    return [first, post(session)]


@pytest.mark.parametrize(
    ("first_timeout", "pause", "case"),
    [(0.2, 0.0, "re-posted while the first call is in flight"), (0.2, 0.6, "re-posted after the unread answer came")],
)
async def test_a_retry_without_header_after_a_client_timeout_is_one_step(
    mock: MockModelServer, first_timeout: float, pause: float, case: str
) -> None:
    mock.script(Reply.text("slow answer", delay=0.5), Reply.text("a second sample"))
    state, session = await open_rollout(mock)
    answers = await asyncio.to_thread(retrying_client, session, first_timeout, pause)
    assert answers == [None, "slow answer"], case
    assert len(mock.requests) == 1, case
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["slow answer"], case
    # once the retry got the answer, the same body again is a new sample, not a retry
    assert await asyncio.to_thread(post, session) == "a second sample"
    assert len(state["trajectory"]) == 2


async def test_identical_calls_whose_callers_wait_are_separate_samples(mock: MockModelServer) -> None:
    mock.script(Reply.text("one", delay=0.3), Reply.text("two", delay=0.3))
    state, session = await open_rollout(mock)
    answers = await asyncio.gather(asyncio.to_thread(post, session), asyncio.to_thread(post, session))
    assert sorted(answers) == ["one", "two"]  # type: ignore[type-var]
    assert len(state["trajectory"]) == 2
