"""Tool calls are outside data: the model's arguments and a program's MCP requests narrow, never widen.

E1: a command agent with ``max_turns=1`` POSTs a JSON-RPC batch of 200 ``tools/call`` to
``$V1_MCP_URL`` after its one model call. C1: the model's tool-call arguments nest 50,000 deep.
"""

from __future__ import annotations

import asyncio
import json
import sys

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply

DEEP = "[" * 50_000 + "]" * 50_000

BATCH_AGENT = """
import json, os, urllib.request, urllib.error, openai
answer = openai.OpenAI().chat.completions.create(model="x", messages=[{"role": "user", "content": "go"}])
def post(body):
    request = urllib.request.Request(os.environ["V1_MCP_URL"], data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=HANG_S) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())
call = lambda i: {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "touch", "arguments": {"n": i}}}
found = {"big": post([call(i) for i in range(200)]), "small": post([call(i) for i in range(16)])}
try:
    openai.OpenAI(max_retries=0).chat.completions.create(model="x", messages=[{"role": "user", "content": "again"}])
except openai.APIStatusError as stopped:
    found["second_turn"] = stopped.status_code
found["late"] = post(call(999))
os.makedirs("out", exist_ok=True)
open("out/found.json", "w").write(json.dumps(found))
"""


def touching_tools(touched: list[int]) -> vf.Toolset:
    def touch(n: int) -> str:
        """Record a side effect (what a reward would check).

        Args:
            n: which call this is.
        """
        touched.append(n)
        return f"touched {n}"

    return vf.Toolset([touch], name="effects")


def answer_with_one_tool_call(request: MockRequest) -> Reply:
    return Reply.tool("touch", {"n": 0}) if request.last_user_text == "go" else Reply.text(request.last_user_text)


async def test_a_batch_of_mcp_tool_calls_past_the_turn_budget_is_refused_and_the_made_ones_recorded() -> None:
    touched: list[int] = []
    with MockModelServer(answer_with_one_tool_call) as mock:
        client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
        program = {
            "command": [sys.executable, "agent.py"],
            "files": {"agent.py": f"HANG_S = {HANG_S}\n{BATCH_AGENT}"},
            "artifacts": [{"path": "out/found.json", "name": "found", "format": "json"}],
        }
        attacker = vf.Harness(client=client, model="m", program=program, toolsets=[touching_tools(touched)], max_turns=1)
        bystander = vf.Harness(client=client, model="m")
        state, other = await asyncio.gather(attacker.run("go"), bystander.run("hello"))
    found = state["artifacts"]["found"]
    status, refusal = found["big"]
    assert status == 400 and refusal["error"]["code"] == -32600 and "at most 16" in refusal["error"]["message"]
    status, answers = found["small"]
    assert status == 200 and len(answers) == 16
    assert [a["result"]["isError"] for a in answers] == [False] + [True] * 15  # the model asked for one call
    assert "the model asked for 1 tool call(s)" in answers[1]["result"]["content"][0]["text"]
    assert found["second_turn"] == 400  # max_turns=1: the endpoint refused the second model call
    assert found["late"][1]["result"]["isError"] is True
    assert "the rollout stopped: max_turns_reached" in found["late"][1]["result"]["content"][0]["text"]
    assert touched == [0]
    [step] = state["trajectory"]
    assert step["extras"]["mcp_tool_calls"] == [
        {"name": "touch", "arguments": {"n": 0}, "content": [{"type": "text", "text": "touched 0"}], "isError": False}
    ]
    assert other["error"] is None and other["completion"] == [{"role": "assistant", "content": "hello"}]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_deeply_nested_tool_arguments_are_a_tool_error_and_the_base_loop_goes_on(mock: MockModelServer) -> None:
    mock.script(Reply.tool("add", '{"a": ' + DEEP + "}"), Reply.text("done"))
    harness = vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", toolsets=[vf.Toolset([add])])
    state = await harness.run("go")
    assert state["error"] is None, state["error"]
    tool_message = state["completion"][1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "Error: the arguments for 'add': nested more than 128 levels deep; send a JSON object"
    assert state["completion"][-1]["content"] == "done" and state["stop_condition"] == "no_tools_called"
    json.dumps(state)


async def test_deeply_nested_tool_arguments_are_a_tool_error_in_the_classic_tool_env(mock: MockModelServer) -> None:
    env = vf.ToolEnv(tools=[add], dataset=[{"question": "q", "answer": "a"}])
    mock.script(Reply.tool("add", '{"a": ' + DEEP + "}"), Reply.text("done"))
    state = await env.rollout({"question": "q", "answer": "a", "example_id": 0}, vf.ClientConfig(api_base_url=mock.url), "m")
    assert state["error"] is None, state["error"]
    tool_texts = [m["content"] for m in state["completion"] if m["role"] == "tool"]
    assert tool_texts == ["Error: the arguments for 'add': nested more than 128 levels deep; send a JSON object"]
    assert state["completion"][-1]["content"] == "done"
