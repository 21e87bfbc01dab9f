"""Every endpoint dialect x every upstream client type, through the official SDKs, over real HTTP.

A program written with the `openai` or `anthropic` SDK runs a two-turn, tool-using
conversation (with reasoning) through the endpoint; the upstream is the mock server
speaking the configured client type's dialect. Every cell is a real round trip, and
the recorded trajectory is the same canonical content in every cell.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply

QUESTION = "What is 1+2?"
ARGS = {"a": 1, "b": 2}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
CHAT_TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": SCHEMA}}
RESPONSES_TOOL = {"type": "function", "name": "add", "description": "Add two integers.", "parameters": SCHEMA, "strict": False}
ANTHROPIC_TOOL = {"name": "add", "description": "Add two integers.", "input_schema": SCHEMA}
UPSTREAMS = [
    "openai_chat_completions",
    "openai_chat_completions_token",
    "openai_responses",
    "anthropic_messages",
    "openai_completions",
]
CHAT_DIALECTS = ["chat_completions", "responses", "messages"]


def respond(request: MockRequest) -> Reply:
    if not request.tools:
        return Reply.text(f"echo: {request.last_user_text}")
    if request.last_message.get("role") == "tool":
        return Reply.text("The sum is 3.", reasoning_content="the tool said 3")
    return Reply.tool("add", ARGS, reasoning_content="I should call add")


@pytest.fixture(scope="module")
def upstream() -> Iterator[MockModelServer]:
    with MockModelServer(respond) as server:
        yield server


CALL_ID = Reply.tool("add", ARGS).tool_calls[0]["id"]
EXPECTED_CALL = {"id": CALL_ID, "type": "function", "function": {"name": "add", "arguments": json.dumps(ARGS)}}
EXPECTED_TURN_1 = {"role": "assistant", "content": None, "reasoning_content": "I should call add", "tool_calls": [EXPECTED_CALL]}
EXPECTED_PROMPT_2 = [
    {"role": "user", "content": QUESTION},
    EXPECTED_TURN_1,
    {"role": "tool", "tool_call_id": CALL_ID, "content": "3"},
]
EXPECTED_TURN_2 = {"role": "assistant", "content": "The sum is 3.", "reasoning_content": "the tool said 3"}


# -- the programs: one per dialect, each written as an agent would write it with the official SDK ------


async def chat_program(state: vf.State, stream: bool) -> str:
    client: openai.AsyncOpenAI = state.get_client("chat_completions")
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    for _ in range(2):
        if stream:
            chunks = await client.chat.completions.create(model="any", messages=messages, tools=[CHAT_TOOL], stream=True)
            content, reasoning, calls = "", "", {}
            async for chunk in chunks:
                delta = chunk.choices[0].delta
                content += delta.content or ""
                reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                for call in delta.tool_calls or ():
                    entry = calls.setdefault(
                        call.index, {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    entry["function"]["name"] += call.function.name or ""
                    entry["function"]["arguments"] += call.function.arguments or ""
            message = {"role": "assistant", "content": content or None, "reasoning_content": reasoning}
            if calls:
                message["tool_calls"] = list(calls.values())
        else:
            completion = await client.chat.completions.create(model="any", messages=messages, tools=[CHAT_TOOL])
            reply = completion.choices[0].message
            message = reply.model_dump(exclude_none=True, include={"role", "content", "tool_calls", "reasoning_content"})
            message.setdefault("content", None)
        messages.append(message)
        if not message.get("tool_calls"):
            return str(message["content"])
        messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "3"})
    raise AssertionError("no final answer")


async def responses_program(state: vf.State, stream: bool) -> str:
    client: openai.AsyncOpenAI = state.get_client("responses")
    if stream:  # the Codex way: SSE events, chained with previous_response_id
        previous, pending = None, QUESTION
        for _ in range(2):
            events = await client.responses.create(
                model="any", input=pending, tools=[RESPONSES_TOOL], previous_response_id=previous, stream=True
            )
            final = None
            async for event in events:
                if event.type == "response.completed":
                    final = event.response
            assert final is not None
            calls = [item for item in final.output if item.type == "function_call"]
            if not calls:
                return final.output_text
            previous = final.id
            pending = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "3"}]
        raise AssertionError("no final answer")
    items: list[Any] = [{"role": "user", "content": QUESTION}]  # stateless: the whole history as items
    for _ in range(2):
        response = await client.responses.create(model="any", input=items, tools=[RESPONSES_TOOL])
        items += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "3"})
    raise AssertionError("no final answer")


async def messages_program(state: vf.State, stream: bool) -> str:
    client: anthropic.AsyncAnthropic = state.get_client("messages")
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    for _ in range(2):
        if stream:
            async with client.messages.stream(model="any", max_tokens=256, messages=messages, tools=[ANTHROPIC_TOOL]) as events:
                message = await events.get_final_message()
        else:
            message = await client.messages.create(model="any", max_tokens=256, messages=messages, tools=[ANTHROPIC_TOOL])
        messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]})
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in message.content if block.type == "text")
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "3"}]})
    raise AssertionError("no final answer")


async def completions_program(state: vf.State, stream: bool) -> str:
    client: openai.AsyncOpenAI = state.get_client("completions")
    if stream:
        chunks = await client.completions.create(model="any", prompt=QUESTION, stream=True)
        return "".join([chunk.choices[0].text async for chunk in chunks])
    completion = await client.completions.create(model="any", prompt=QUESTION)
    return completion.choices[0].text


PROGRAMS = {
    "chat_completions": chat_program,
    "responses": responses_program,
    "messages": messages_program,
    "completions": completions_program,
}


async def run_cell(upstream: MockModelServer, dialect: Any, client_type: str, stream: bool) -> tuple[vf.State, list[Any]]:
    """Run one program (a dialect's name in `PROGRAMS`, or the program function) against `client_type`."""
    run = PROGRAMS[dialect] if isinstance(dialect, str) else dialect
    answers: list[Any] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        try:
            answers.append(await run(state, stream))
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            answers.append(exc)

    config = vf.ClientConfig(client_type=client_type, api_base_url=upstream.url, max_retries=0, preserve_all_thinking=True)
    harness = vf.Harness(program=program, client=config, model="the-model")
    state = await harness.run({"prompt": QUESTION})
    return state, answers


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("client_type", UPSTREAMS[:4])
@pytest.mark.parametrize("dialect", CHAT_DIALECTS)
async def test_chat_dialects_through_every_chat_upstream(
    upstream: MockModelServer, dialect: str, client_type: str, stream: bool
) -> None:
    state, answers = await run_cell(upstream, dialect, client_type, stream)
    assert answers == ["The sum is 3."], answers
    assert state["error"] is None
    steps = state["trajectory"]
    assert [step["prompt"] for step in steps] == [[{"role": "user", "content": QUESTION}], EXPECTED_PROMPT_2]
    assert [step["completion"] for step in steps] == [[EXPECTED_TURN_1], [EXPECTED_TURN_2]]
    assert steps[0]["response"]["message"]["finish_reason"] == "tool_calls"
    usages = [step["response"]["usage"] for step in steps]
    assert all(usage["completion_tokens"] > 0 for usage in usages)
    assert state["token_usage"]["input_tokens"] == sum(usage["prompt_tokens"] for usage in usages)
    assert state["token_usage"]["output_tokens"] == sum(usage["completion_tokens"] for usage in usages)
    seen = upstream.requests[-2:]
    assert [r.dialect for r in seen] == [client_type.removeprefix("openai_").removeprefix("anthropic_")] * 2
    assert [t["function"]["name"] for t in seen[0].tools] == ["add"]
    assert seen[1].messages[-1] == {"role": "tool", "tool_call_id": CALL_ID, "content": "3"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("client_type", UPSTREAMS)
async def test_completions_dialect_through_every_upstream(upstream: MockModelServer, client_type: str, stream: bool) -> None:
    state, answers = await run_cell(upstream, "completions", client_type, stream)
    assert answers == [f"echo: {QUESTION}"]
    (step,) = state["trajectory"]
    assert step["prompt"] == QUESTION
    assert step["completion"] == [{"role": "assistant", "content": f"echo: {QUESTION}"}]
    assert state["error"] is None
    (seen,) = [r for r in upstream.requests if r.body.get("prompt") == QUESTION or r.last_user_text == QUESTION][-1:]
    if client_type == "openai_completions":
        assert seen.body["prompt"] == QUESTION
    else:  # a text prompt reaches a chat upstream as one user message
        assert seen.messages == [{"role": "user", "content": QUESTION}]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", CHAT_DIALECTS)
async def test_chat_messages_to_a_completions_upstream_are_a_clear_400(
    upstream: MockModelServer, dialect: str, stream: bool
) -> None:
    state, answers = await run_cell(upstream, dialect, "openai_completions", stream)
    (error,) = answers
    assert isinstance(error, (openai.BadRequestError, anthropic.BadRequestError))
    assert error.status_code == 400
    assert "cannot be sent to an openai_completions upstream" in str(error)
    assert state["trajectory"] == []


async def plain_chat(state: vf.State, stream: bool) -> str:
    client: openai.AsyncOpenAI = state.get_client("chat_completions")
    if stream:
        chunks = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": QUESTION}], stream=True)
        return "".join([chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices])
    completion = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": QUESTION}])
    return completion.choices[0].message.content or ""


async def plain_responses(state: vf.State, stream: bool) -> str:
    client: openai.AsyncOpenAI = state.get_client("responses")
    if stream:
        async with client.responses.stream(model="any", input=QUESTION) as events:
            return (await events.get_final_response()).output_text
    return (await client.responses.create(model="any", input=QUESTION)).output_text


async def plain_messages(state: vf.State, stream: bool) -> str:
    client: anthropic.AsyncAnthropic = state.get_client("messages")
    messages: Any = [{"role": "user", "content": QUESTION}]
    if stream:
        async with client.messages.stream(model="any", max_tokens=64, messages=messages) as events:
            return await events.get_final_text()
    message = await client.messages.create(model="any", max_tokens=64, messages=messages)
    return "".join(block.text for block in message.content if block.type == "text")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("client_type", UPSTREAMS[:4])
@pytest.mark.parametrize("dialect", CHAT_DIALECTS)
async def test_chat_dialects_without_tools(upstream: MockModelServer, dialect: str, client_type: str, stream: bool) -> None:
    program = {"chat_completions": plain_chat, "responses": plain_responses, "messages": plain_messages}[dialect]
    state, answers = await run_cell(upstream, program, client_type, stream)
    assert answers == [f"echo: {QUESTION}"]
    (step,) = state["trajectory"]
    assert step["prompt"] == [{"role": "user", "content": QUESTION}]
    assert step["completion"] == [{"role": "assistant", "content": f"echo: {QUESTION}"}]
    assert upstream.requests[-1].tools == []


def test_sync_sdk_clients_for_every_dialect(upstream: MockModelServer) -> None:
    def program(task: vf.Task, state: vf.State) -> None:
        oa = state.get_client("chat_completions", sync=True)
        state["answers"] = [
            oa.chat.completions.create(model="x", messages=[{"role": "user", "content": "a"}]).choices[0].message.content
        ]
        state["answers"].append(oa.completions.create(model="x", prompt="b").choices[0].text)
        state["answers"].append(state.get_client("responses", sync=True).responses.create(model="x", input="c").output_text)
        an = state.get_client("messages", sync=True)
        message = an.messages.create(model="x", max_tokens=5, messages=[{"role": "user", "content": "d"}])
        state["answers"].append(message.content[0].text)

    config = vf.ClientConfig(api_base_url=upstream.url, max_retries=0)
    state = asyncio.run(vf.Harness(program=program, client=config, model="m").run({"prompt": "x"}))
    assert state["error"] is None
    assert state["answers"] == ["echo: a", "echo: b", "echo: c", "echo: d"]
    assert [step["prompt"] for step in state["trajectory"]] == [
        [{"role": "user", "content": "a"}],
        "b",
        [{"role": "user", "content": "c"}],
        [{"role": "user", "content": "d"}],
    ]


@pytest.mark.parametrize("client_type", ["openai_responses", "anthropic_messages", "openai_chat_completions_token"])
async def test_base_loop_with_tools_over_every_upstream(upstream: MockModelServer, client_type: str) -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    config = vf.ClientConfig(client_type=client_type, api_base_url=upstream.url, max_retries=0)
    state = await vf.Harness(client=config, model="m", toolsets=[vf.Toolset([add])]).run({"prompt": QUESTION})
    assert state["error"] is None
    assert state["completion"][-1]["content"] == "The sum is 3."
    assert [m["role"] for m in state["completion"]] == ["assistant", "tool", "assistant"]
    assert state["completion"][1]["content"] == "3"
    assert upstream.requests[-1].dialect == client_type.removeprefix("openai_").removeprefix("anthropic_")


async def test_upstream_auth_failure_surfaces_in_the_programs_dialect(upstream: MockModelServer) -> None:
    failing = vf.ClientConfig(client_type="anthropic_messages", api_base_url=upstream.url, max_retries=0)

    async def program(task: vf.Task, state: vf.State) -> None:
        upstream.script(Reply.fail(401, "invalid x-api-key"))
        with pytest.raises(openai.AuthenticationError) as caught:
            await state.get_client("responses").responses.create(model="m", input="hi")
        state["code"] = caught.value.code

    state = await vf.Harness(program=program, client=failing, model="m").run({"prompt": "x"})
    assert state["code"] == "upstream_auth"
    assert state["trajectory"] == []
