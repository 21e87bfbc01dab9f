"""Sync programs and sync handlers never starve the endpoint of threads."""

from __future__ import annotations

import asyncio

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer


async def test_256_concurrent_sync_programs_with_sync_stops_finish(mock: MockModelServer) -> None:
    def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client(sync=True)
        for _ in range(2):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    def never(state: vf.State) -> bool:  # a sync @stop: the endpoint runs it before every call
        return False

    harness = vf.Harness(
        program=program,
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        stops=[vf.stop(never)],
    )
    states = await asyncio.wait_for(asyncio.gather(*(harness.run({"prompt": "p"}) for _ in range(256))), timeout=HANG_S)
    assert [state["error"] for state in states] == [None] * 256
    assert all(len(state["trajectory"]) == 2 for state in states)
