"""A conversation resent turn after turn is recorded once: steps share the messages they have in common.

Each request a program sends is parsed anew, so before this every step held its own copy of the
whole conversation so far: a rollout of n turns kept O(n²) messages in memory while in flight.
The tests drive real multi-turn programs (the SDK over real HTTP, the SDK in process, the base
loop with a tool) against a real `MockModelServer`.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import v1 as vf
from v1.testing import MockModelServer, Reply


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def harness(mock: MockModelServer, program: Any, **kwargs: Any) -> vf.Harness:
    return vf.Harness(
        program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", max_turns=30, **kwargs
    )


def conversation_program(turns: int, user_bytes: int, over_http: bool, sent: list[list[dict[str, Any]]] | None) -> Any:
    """A program that resends its growing conversation `turns` times, keeping a copy of each request in `sent`."""

    async def program(task: vf.Task, state: vf.State) -> None:
        if over_http:
            config = state.get_endpoint_config()
            client = openai.AsyncOpenAI(base_url=config["base_url"], api_key=config["api_key"], max_retries=0)
        else:
            client = state.get_client()
        messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
        for turn in range(turns):
            if sent is not None:
                sent.append(json.loads(json.dumps(messages)))
            answer = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            messages.append({"role": "user", "content": f"turn {turn} " + "y" * user_bytes})
        state["completion"] = messages[1:]

    return program


@pytest.mark.parametrize("over_http", [False, True], ids=["in-process", "http"])
async def test_each_step_shares_the_messages_the_step_before_it_had(mock: MockModelServer, over_http: bool) -> None:
    sent: list[list[dict[str, Any]]] = []
    state = await harness(mock, conversation_program(4, 10, over_http, sent)).run({"prompt": "p"})
    assert state["error"] is None
    steps = state["trajectory"]
    assert [step["prompt"] for step in steps] == sent  # recorded as sent
    for before, step in itertools.pairwise(steps):
        earlier = [*before["prompt"], *before["completion"]]
        assert len(step["prompt"]) == len(earlier) + 1
        assert all(message is shared for message, shared in zip(step["prompt"], earlier))
        assert step["prompt"][-1] not in earlier  # the new turn is the step's own
    assert json.loads(json.dumps(state))["trajectory"][3]["prompt"] == sent[3]  # saved whole, as before


async def test_a_rewritten_history_is_recorded_as_sent_and_shares_only_what_kept_its_place(mock: MockModelServer) -> None:
    mock.script(Reply.text("a"), Reply.text("b"))
    sent: list[list[dict[str, Any]]] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        first = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
        second = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "three"}]
        for messages in (first, second):
            sent.append(json.loads(json.dumps(messages)))
            await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

    state = await harness(mock, program).run({"prompt": "p"})
    assert state["error"] is None
    first_step, second_step = state["trajectory"]
    assert [first_step["prompt"], second_step["prompt"]] == sent
    assert second_step["prompt"][0] is first_step["prompt"][0]
    assert second_step["prompt"][1] == first_step["completion"][0]
    assert second_step["prompt"][1] is not first_step["completion"][0]  # the same message at another place: not looked for


async def test_the_base_loops_tool_turns_share_the_prompt_and_the_call(mock: MockModelServer) -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    mock.script(Reply.tool("add", {"a": 1, "b": 2}), Reply.text("3"))
    state = await vf.Harness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", toolsets=[vf.Toolset([add])]
    ).run({"prompt": "add 1 and 2"})
    assert state["error"] is None
    first, second = state["trajectory"]
    assert second["prompt"][0] is first["prompt"][0]
    assert second["prompt"][1] is first["completion"][0]  # the call, as the base loop sent it back
    assert second["prompt"][1]["tool_calls"][0]["function"]["name"] == "add"
    assert second["prompt"][2] == {"role": "tool", "tool_call_id": second["prompt"][1]["tool_calls"][0]["id"], "content": "3"}


async def test_a_long_conversation_in_memory_grows_with_its_length_not_its_square(mock: MockModelServer) -> None:
    """12 turns of 5 KB: each step used to hold the whole conversation so far (about 6x the conversation in all).

    Counted: what v1 itself allocated and still holds (the mock server in this process logs every request).
    """
    run = harness(mock, conversation_program(12, 5_000, False, None))
    await run.run({"prompt": "warm"})
    tracemalloc.start()
    try:
        state = await run.run({"prompt": "p"})
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    v1_files = [
        tracemalloc.Filter(True, f"{Path(vf.__file__).parent}/*"),
        tracemalloc.Filter(False, f"{Path(vf.__file__).parent}/testing/*"),
    ]
    held = sum(stat.size for stat in snapshot.filter_traces(v1_files).statistics("filename"))
    assert state["error"] is None and len(state["trajectory"]) == 12
    conversation = len(json.dumps(state["completion"]))
    recorded = len(json.dumps(state["trajectory"]))
    assert recorded > 5 * conversation  # what the saved state spells out is still every step's whole prompt
    assert held < 3 * conversation, f"{held} bytes held for a conversation of {conversation}"


@pytest.mark.parametrize("appended", ["a note", {"prompt": "text", "completion": None}, ["not", "a", "step"]])
async def test_the_next_call_shares_with_the_recorded_step_not_an_entry_the_program_appended(
    mock: MockModelServer, appended: Any
) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        first = await state.get_client().chat.completions.create(model="m", messages=messages)
        state["trajectory"].append(appended)
        messages.append({"role": "assistant", "content": first.choices[0].message.content})
        await state.get_client().chat.completions.create(model="m", messages=messages)

    state = await harness(mock, program).run({"prompt": "p"})
    first, second = state["trajectory"]  # the program's entry was taken out as its error (tests/test_foreign_steps.py)
    assert second["prompt"][0] is first["prompt"][0] and second["prompt"][1] is first["completion"][0]
