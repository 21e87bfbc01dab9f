"""A program's trajectory entries that are not steps are taken out as its error, where it hands the trajectory back.

The endpoint records model calls as steps; a program holds the same list and may append to it. Every
later reader (the completion's rendering, group scoring, token counts, token budgets, the endpoint's
MCP server) takes each entry for a step, so before this a string or a half-built dict appended by a
program made `harness.run` raise. The tests drive real programs against a real `MockModelServer`,
and an MCP client over HTTP to the endpoint's MCP server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1._util.steps import is_step
from v1.testing import MockModelServer, Reply

FOREIGN = [
    "a note",
    ["not", "a", "step"],
    {"prompt": "text", "completion": None},
    {"note": 1},
    {"prompt": [{"role": "user", "content": "x"}]},
    None,
]


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def harness(mock: MockModelServer, program: Any, **kwargs: Any) -> vf.Harness:
    return vf.Harness(program=program, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", **kwargs)


USER_HI = [{"role": "user", "content": "hi"}]


async def ask(state: vf.State) -> None:
    await state.get_client().chat.completions.create(model="m", messages=USER_HI)  # type: ignore[arg-type]


def test_a_step_is_a_dict_whose_prompt_and_completion_are_messages() -> None:
    assert is_step({"prompt": [], "completion": []})
    assert is_step({"prompt": "text", "completion": "more text"})  # the completions format
    assert not any(is_step(entry) for entry in FOREIGN)


@pytest.mark.parametrize("entry", FOREIGN, ids=repr)
async def test_an_entry_appended_after_the_last_call_is_the_programs_error_not_a_crash(mock: MockModelServer, entry: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        await ask(state)
        state["trajectory"].append(entry)

    state = await harness(mock, program).run({"prompt": "p"})
    assert state["error"] is not None and state["error"]["where"] == "program"
    assert state["error"]["type"] == "TypeError"
    assert "trajectory[1]" in state["error"]["message"] and repr(entry)[:20] in state["error"]["message"]
    [step] = state["trajectory"]
    assert step["prompt"] == [{"role": "user", "content": "hi"}]
    assert state["completion"] == step["completion"]  # rendered from the recorded step, not the foreign entry
    assert state["stop_condition"] == "has_error"


async def test_entries_before_and_between_calls_leave_every_call_recorded(mock: MockModelServer) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        state["trajectory"].append("before")
        await ask(state)
        state["trajectory"].append({"between": True})
        await ask(state)

    state = await harness(mock, program, max_turns=5).run({"prompt": "p"})
    assert len(state["trajectory"]) == 2 and all(is_step(step) for step in state["trajectory"])
    assert state["error"]["message"].startswith("2 trajectory entries are not a step and were taken out")
    assert "trajectory[0], 'before'" in state["error"]["message"]


async def test_token_budgets_and_max_seq_len_count_the_recorded_steps_past_a_foreign_entry(mock: MockModelServer) -> None:
    seen: list[Any] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        await ask(state)
        state["trajectory"].append({"note": "mine"})
        try:
            await ask(state)
        except Exception as refused:
            seen.append(str(refused))
            raise
        seen.append(len(state["trajectory"]))

    budgeted = harness(mock, program, max_turns=5, max_seq_len=100_000, max_total_completion_tokens=10_000)
    state = await budgeted.run({"prompt": "p"})
    assert seen == [3]  # the second call was made and recorded after the foreign entry
    assert len(state["trajectory"]) == 2 and state["token_usage"]["output_tokens"] > 0
    assert "trajectory[1], {'note': 'mine'}" in state["error"]["message"]
    seen.clear()
    spent = harness(mock, program, max_turns=5, max_total_completion_tokens=1)
    stopped = await spent.run({"prompt": "p"})
    assert len(stopped["trajectory"]) == 1  # the budget counted the first step past the foreign entry: no second call
    assert len(seen) == 1 and "max_total_completion_tokens_reached" in seen[0]


async def test_group_scoring_sets_rewards_on_the_steps_left(mock: MockModelServer) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        await ask(state)
        state["trajectory"].append("a note")

    states = await harness(mock, program).run_group([vf.Task({"prompt": "p"}), vf.Task({"prompt": "q"})])
    for state in states:
        [step] = state["trajectory"]
        assert step["advantage"] == 0.0 and "a note" in state["error"]["message"]


async def test_an_entry_a_cleanup_appends_is_taken_out_before_the_state_is_final(mock: MockModelServer) -> None:
    @vf.cleanup
    async def scribble(state: vf.State) -> None:
        state["trajectory"].append(["cleanup", "note"])

    async def program(task: vf.Task, state: vf.State) -> None:
        await ask(state)

    state = await harness(mock, program, cleanups=[scribble]).run({"prompt": "p"})
    assert len(state["trajectory"]) == 1
    assert state["error"]["where"] == "cleanup" and "['cleanup', 'note']" in state["error"]["message"]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


ADD_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}


def mcp_route(state: vf.State) -> tuple[str, dict[str, str]]:
    """The rollout's MCP server URL and the headers that carry its key."""
    config = state.get_endpoint_config()
    return config["base_url"].removesuffix("/v1") + "/mcp", {"Authorization": f"Bearer {config['api_key']}"}


async def run_with_add(program: Any) -> vf.State:
    """`program` against a mock that asks for `add(2, 3)`, with `add` as the rollout's one tool."""
    with MockModelServer(Reply.tool("add", {"a": 2, "b": 3})) as mock:
        return await harness(mock, program, toolsets=[vf.Toolset([add], name="maths")]).run({"prompt": "p"})


async def test_the_endpoints_mcp_server_records_a_tool_call_on_the_models_answer_past_a_foreign_entry() -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        url, auth = mcp_route(state)
        await ask(state)
        state["trajectory"].append("a note after the answer")
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            state["answer"] = (await http.post(url, json=ADD_CALL, headers=auth)).json()["result"]

    state = await run_with_add(program)
    assert state["answer"]["isError"] is False and state["answer"]["content"][0]["text"] == "5"
    [step] = state["trajectory"]
    assert [call["name"] for call in step["extras"]["mcp_tool_calls"]] == ["add"]


async def test_the_mcp_servers_limit_is_counted_by_the_endpoint_not_read_from_the_programs_step() -> None:
    """One tool call asked for allows one MCP call: a program that deletes its step's `extras` (a 500 before)
    or clears the record of the calls made (another call allowed before) changes neither."""

    async def program(task: vf.Task, state: vf.State) -> None:
        url, auth = mcp_route(state)
        await ask(state)
        step = state["trajectory"][-1]
        del step["extras"]
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            first = await http.post(url, json=ADD_CALL, headers=auth)
            step["extras"]["mcp_tool_calls"].clear()
            second = await http.post(url, json=ADD_CALL, headers=auth)
        state["answers"] = [first.status_code, first.json()["result"], second.status_code, second.json()["result"]]

    state = await run_with_add(program)
    assert state["error"] is None
    first_status, first, second_status, second = state["answers"]
    assert (first_status, first["isError"], first["content"][0]["text"]) == (200, False, "5")
    assert second_status == 200 and second["isError"] is True
    assert second["content"][0]["text"].startswith(
        "refused: the model asked for 1 tool call(s) in its last answer and 1 were made"
    )
    [step] = state["trajectory"]
    assert step["extras"] == {"mcp_tool_calls": []}  # the program cleared the record; the endpoint kept the count


async def test_the_budgets_count_what_was_spent_whatever_the_program_does_to_its_steps(mock: MockModelServer) -> None:
    """A program holds its recorded steps: one that clears them gets no budget back, and one that rewrites
    a step's fields leaves the next call's limits and shared messages to work from what was recorded."""
    made: list[int] = []

    async def clearing(task: vf.Task, state: vf.State) -> None:
        for _ in range(5):
            await ask(state)
            made.append(len(state["trajectory"]))
            state["trajectory"].clear()

    async def once(task: vf.Task, state: vf.State) -> None:
        await ask(state)

    per_call = (await harness(mock, once).run({"prompt": "p"}))["token_usage"]["output_tokens"]
    assert per_call > 0
    state = await harness(mock, clearing, max_turns=10, max_total_completion_tokens=int(2 * per_call)).run({"prompt": "p"})
    assert made == [1, 1]  # the third call was refused: two calls' tokens were spent, cleared steps or not
    assert state["stop_condition"] in ("max_total_completion_tokens_reached", "has_error")

    async def rewriting(task: vf.Task, state: vf.State) -> None:
        await ask(state)
        step = state["trajectory"][0]
        step["response"] = None
        del step["tokens"]
        step["prompt"] = "rewritten"
        await ask(state)

    rewritten = await harness(mock, rewriting, max_turns=5, max_seq_len=100_000, max_output_tokens=10_000).run({"prompt": "p"})
    assert len(rewritten["trajectory"]) == 2 and rewritten["trajectory"][1]["prompt"] == USER_HI
    assert rewritten["error"] is None, rewritten["error"]
