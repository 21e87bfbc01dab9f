"""A program written with the `openai-agents` SDK (Responses API by default) solves a tool task through the endpoint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply

agents = pytest.importorskip("agents")


@agents.function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def respond(request: MockRequest) -> Reply:
    if request.last_message.get("role") == "tool":
        return Reply.text(f"The sum is {request.last_message['content']}.")
    return Reply.tool("add", {"a": 1, "b": 2}, reasoning_content="add them")


@pytest.fixture
def upstream() -> Iterator[MockModelServer]:
    with MockModelServer(respond) as server:
        yield server


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_openai_agents_program_uses_a_tool_through_the_endpoint(upstream: MockModelServer, streamed: bool) -> None:
    agents.set_tracing_disabled(True)

    async def program(task: vf.Task, state: vf.State) -> None:
        model = agents.OpenAIResponsesModel(model="whatever", openai_client=state.get_client("responses"))
        agent = agents.Agent(name="calculator", instructions="Use the add tool.", tools=[add], model=model)
        if streamed:
            run = agents.Runner.run_streamed(agent, task["prompt"])
            async for _ in run.stream_events():
                pass
        else:
            run = await agents.Runner.run(agent, task["prompt"])
        state["answer"] = run.final_output

    harness = vf.Harness(program=program, client=vf.ClientConfig(api_base_url=upstream.url, max_retries=0), model="m")
    state = await harness.run({"prompt": "What is 1+2?"})
    assert state["error"] is None
    assert state["answer"] == "The sum is 3."
    first, second = state["trajectory"]
    assert first["prompt"] == [{"role": "system", "content": "Use the add tool."}, {"role": "user", "content": "What is 1+2?"}]
    (call,) = first["completion"][0]["tool_calls"]
    assert call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert second["prompt"][-2]["reasoning_content"] == "add them"  # the reasoning item came back and survived
    assert second["prompt"][-1] == {"role": "tool", "tool_call_id": call["id"], "content": "3"}
    assert second["completion"] == [{"role": "assistant", "content": "The sum is 3."}]
    # a streamed run is relayed from a streamed upstream call, a plain one from a plain call
    assert [request.body.get("stream") for request in upstream.requests] == [True if streamed else None] * 2
