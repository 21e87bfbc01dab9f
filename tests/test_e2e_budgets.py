"""Budgets per rollout, end to end against the mock model over real HTTP: token budgets counted from the
recorded usage and enforced by the endpoint for every program form, row narrowing, and `v1 eval`'s summary."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, growing_limits
from v1.testing import MockModelServer, Reply

ROOT = Path(__file__).resolve().parent.parent


def lookup(word: str) -> str:
    """Look a word up.

    Args:
        word: the word
    """
    return f"found {word}"


def tool_reply(output_tokens: int, prompt_tokens: int | None = None) -> Reply:
    """A tool-calling answer whose usage reports exactly these counts."""
    return Reply.tool("lookup", {"word": "w"}, completion_ids=list(range(output_tokens)), prompt_tokens=prompt_tokens)


def budget_rows() -> list[dict[str, Any]]:
    return [{"prompt": f"question {i}"} for i in range(2)]


async def test_output_budget_caps_max_tokens_then_stops_the_base_loop(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(tool_reply(6), tool_reply(4), tool_reply(1))
    harness = make_harness(toolsets=[vf.Toolset([lookup])], max_output_tokens=10, max_turns=10)
    state = await harness.run({"prompt": "go"})

    assert state["stop_condition"] == "max_output_tokens_reached" and state["error"] is None
    assert len(state["trajectory"]) == 2 and len(mock.requests) == 2
    # the second call may only spend what is left of the budget
    assert "max_tokens" not in mock.requests[0].body or mock.requests[0].body["max_tokens"] >= 10
    assert mock.requests[1].body["max_tokens"] == 4
    assert state["token_usage"]["output_tokens"] == 10


async def test_input_budget_counts_reported_usage_not_prompt_length(mock: MockModelServer, make_harness: Any) -> None:
    long_prompt = " ".join(["word"] * 20_000)
    mock.script(*(tool_reply(1, prompt_tokens=5) for _ in range(4)))
    harness = make_harness(toolsets=[vf.Toolset([lookup])], max_input_tokens=12, max_turns=10)
    state = await harness.run({"prompt": long_prompt})

    # 5 + 5 < 12 admits a third call; after it 15 >= 12 refuses the fourth. A 20,000-word prompt counted
    # by its text would have stopped the rollout after the first call.
    assert state["stop_condition"] == "max_input_tokens_reached" and state["error"] is None
    assert len(state["trajectory"]) == 3
    assert state["token_usage"]["input_tokens"] == 15


async def test_total_budget_ends_a_python_program_without_an_error(mock: MockModelServer, make_harness: Any) -> None:
    answers: list[str] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        for _ in range(10):
            answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            answers.append(answer.choices[0].message.content or "")

    mock.script(*(Reply.text("ok", completion_ids=[1, 2, 3], prompt_tokens=4) for _ in range(10)))
    state = await make_harness(program=program, max_total_tokens=20).run({"prompt": "x"})

    # 7 per call: 7, 14 admit; 21 >= 20 refuses the fourth call, which the program sees as an error status
    assert state["stop_condition"] == "max_total_tokens_reached" and state["error"] is None
    assert len(state["trajectory"]) == 3 and len(answers) == 3
    assert mock.requests[2].body["max_tokens"] == 6


@pytest.mark.parametrize("widen", ["runtime", "task"])
async def test_a_program_cannot_widen_its_limits_by_writing_to_the_state(
    mock: MockModelServer, make_harness: Any, widen: str
) -> None:
    """The endpoint keeps the turn limit and the budgets as the rollout opened: a program holds the state, and
    raising `runtime.max_turns` or the budgets there, or swapping in a task with looser ones, changes nothing."""
    calls: list[int] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        if widen == "runtime":
            state.runtime.max_turns = 100
            state.runtime.token_budgets = {"max_total_tokens": 10**9}
        else:
            state.task = vf.Task({**task, "max_turns": 100, "max_total_tokens": 10**9}).freeze()
        client = state.get_client()
        for _ in range(10):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            calls.append(len(calls))

    mock.script(*(Reply.text("ok", completion_ids=[1, 2, 3], prompt_tokens=4) for _ in range(10)))
    budget_bound = await make_harness(program=program, max_turns=8, max_total_tokens=20).run({"prompt": "x"})
    assert budget_bound["stop_condition"] == "max_total_tokens_reached" and len(budget_bound["trajectory"]) == 3
    turn_bound = await make_harness(program=program, max_turns=8).run({"prompt": "x", "max_turns": 2})
    assert turn_bound["stop_condition"] == "max_turns_reached" and len(turn_bound["trajectory"]) == 2
    assert len(mock.requests) == 5


async def test_budgets_hold_for_streamed_calls(mock: MockModelServer, make_harness: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        for _ in range(10):
            stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
            async for _chunk in stream:
                pass

    mock.script(*(Reply.text("ok", completion_ids=[1, 2, 3]) for _ in range(10)))
    state = await make_harness(program=program, max_output_tokens=6).run({"prompt": "x"})

    assert state["stop_condition"] == "max_output_tokens_reached" and state["error"] is None
    assert len(state["trajectory"]) == 2 and len(mock.requests) == 2


COMMAND_AGENT = """
import openai
client = openai.OpenAI()
for i in range(10):
    client.chat.completions.create(model="x", messages=[{"role": "user", "content": f"call {i}"}])
"""


async def test_output_budget_ends_a_command_program(mock: MockModelServer, make_harness: Any, tmp_path: Path) -> None:
    mock.script(*(Reply.text("ok", completion_ids=[1, 2, 3, 4]) for _ in range(10)))
    program = {"command": [sys.executable, "agent.py"], "files": {"agent.py": COMMAND_AGENT}}
    state = await make_harness(program=program, max_output_tokens=8).run({"prompt": "x"})

    assert state["stop_condition"] == "max_output_tokens_reached" and state["error"] is None
    assert len(state["trajectory"]) == 2 and len(mock.requests) == 2
    assert state["program_result"]["exit_code"] != 0  # the agent died on the refusal; the rollout did not


async def test_a_row_narrows_a_budget_never_widens_it(mock: MockModelServer, make_harness: Any) -> None:
    harness = make_harness(toolsets=[vf.Toolset([lookup])], max_output_tokens=6, max_turns=10)
    unlimited = make_harness(toolsets=[vf.Toolset([lookup])], max_turns=10)
    cases = [(harness, 2, 1), (harness, 1000, 3), (unlimited, 4, 2)]  # (harness, the row's budget, turns it allows)
    for chosen, row_budget, turns in cases:
        mock.script(*(tool_reply(2) for _ in range(10)))
        state = await chosen.run({"prompt": "go", "max_output_tokens": row_budget})
        assert state["stop_condition"] == "max_output_tokens_reached", (row_budget, state["stop_condition"])
        assert len(state["trajectory"]) == turns, row_budget
        mock.reset()


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "100", 2**40])
def test_a_bad_row_budget_is_one_line_naming_the_field(value: Any) -> None:
    with pytest.raises(vf.TaskError, match="field 'max_total_tokens': expected a positive integer"):
        vf.Task({"prompt": "x", "max_total_tokens": value})


@pytest.mark.parametrize("field", ["max_input_tokens", "max_output_tokens", "max_total_tokens", "max_tool_output"])
@pytest.mark.parametrize("value", [0, -5, 2.5, True, "100", 2**40])
def test_a_bad_token_setting_is_one_config_error(field: str, value: Any, tmp_path: Path) -> None:
    with pytest.raises(vf.ConfigError, match=f"field '(harness\\.)?{field}'") as python_error:
        vf.Harness(**{field: value})
    assert "\n" not in str(python_error.value)
    toml = tmp_path / "env.toml"
    toml.write_text(f"[env.taskset]\n[env.harness]\n{field} = {json.dumps(value)}\n")
    with pytest.raises(vf.ConfigError, match=f"field '(harness\\.)?{field}'"):
        vf.EnvConfig.from_toml(toml, "env")


ENV_TOML = """
[env.taskset]
source = "tests.test_e2e_budgets:budget_rows"

[[env.taskset.toolsets]]
tools = ["tests.test_e2e_budgets:lookup"]

[env.harness]
max_turns = 10
"""


def run_eval(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "budgets.toml"
    config.write_text(ENV_TOML)
    command = [sys.executable, "-m", "v1.cli", "eval", str(config), *args, "--output-dir", str(tmp_path / "out")]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)


def test_v1_eval_override_ends_rollouts_and_the_summary_counts_them(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = lambda request: tool_reply(3)
    done = run_eval(tmp_path, "-b", mock.url, "-m", "m", "-n", "2", "-r", "2", "--harness.max_output_tokens", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    [run] = list((tmp_path / "out").iterdir())
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["stop_conditions"] == {"max_output_tokens_reached": 4}
    assert metadata["num_errors"] == 0
    outputs = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [len(output["trajectory"]) for output in outputs] == [2, 2, 2, 2]


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "true", '"many"', "1e40"])
def test_v1_eval_refuses_a_bad_budget_in_one_line(value: str, tmp_path: Path) -> None:
    done = run_eval(tmp_path, "-b", "http://127.0.0.1:9/v1", "-m", "m", "--harness.max_total_tokens", value)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_total_tokens" in lines[0], done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_docs_example_budget_toml_loads(tmp_path: Path) -> None:
    toml = tmp_path / "env.toml"
    toml.write_text(
        textwrap.dedent("""
        [env.taskset]
        [env.harness]
        max_input_tokens = 200000
        max_output_tokens = 20000
        max_total_tokens = 210000
        """)
    )
    config = vf.EnvConfig.from_toml(toml, "env").harness
    assert (config.max_input_tokens, config.max_output_tokens, config.max_total_tokens) == (200000, 20000, 210000)


# -- stage timeouts ----------------------------------------------------------------------------


async def test_setup_timeout_ends_the_rollout_and_cleanup_still_runs(mock: MockModelServer, make_harness: Any) -> None:
    cleaned: list[str] = []

    @vf.setup
    async def slow_setup(state: vf.State) -> None:
        await asyncio.sleep(HANG_S)

    @vf.cleanup
    async def remember(state: vf.State) -> None:
        cleaned.append(state["stop_condition"])

    harness = make_harness(setups=[slow_setup], cleanups=[remember], setup_timeout_seconds=0.2)
    state = await harness.run({"prompt": "x"})

    assert state["stop_condition"] == "setup_timeout_reached" and state["error"] is None
    assert mock.requests == [] and state["trajectory"] == []  # the program never ran
    assert cleaned == ["setup_timeout_reached"]


async def test_program_timeout_ends_the_rollout_and_cleanup_still_runs(mock: MockModelServer, make_harness: Any) -> None:
    answered: list[str] = []
    cleaned: list[str] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        answered.append("hi")
        await asyncio.sleep(HANG_S)

    @vf.cleanup
    async def remember(state: vf.State) -> None:
        cleaned.append(state["stop_condition"])

    # the limit must outlast the first model call: a call it cuts off records no step, so on a loaded machine try longer
    for limit in growing_limits(0.5):
        answered.clear()
        cleaned.clear()
        state = await make_harness(program=program, cleanups=[remember], timeout_seconds=limit).run({"prompt": "x"})
        if answered:
            break

    assert state["stop_condition"] == "timeout_reached" and state["error"] is None
    assert len(state["trajectory"]) == 1 and cleaned == ["timeout_reached"]


@vf.reward
async def slow_reward(completion: list[dict[str, Any]]) -> float:
    await asyncio.sleep(HANG_S)
    return 1.0


@vf.metric
def quick_metric(completion: list[dict[str, Any]]) -> float:
    return 1.0


async def test_scoring_timeout_ends_the_rollout_and_cleanup_still_runs(mock: MockModelServer, make_harness: Any) -> None:
    cleaned: list[str] = []

    @vf.cleanup
    async def remember(state: vf.State) -> None:
        cleaned.append(state["stop_condition"])

    harness = make_harness(rewards=[slow_reward], cleanups=[remember], scoring_timeout_seconds=0.2)
    state = await harness.run({"prompt": "x"})

    assert state["stop_condition"] == "scoring_timeout_reached" and state["error"] is None
    assert state["reward"] == 0.0 and len(state["trajectory"]) == 1
    assert cleaned == ["scoring_timeout_reached"]


async def test_evaluate_counts_each_stage_timeout_in_the_summary(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    taskset = vf.Taskset(taskset_id="slow", source=budget_rows, rewards=[slow_reward], metrics=[quick_metric])
    env = vf.Env(taskset, vf.Harness(scoring_timeout_seconds=0.2))
    result = await env.evaluate(client_config, "m", num_examples=2, rollouts_per_example=2)

    assert result["metadata"]["stop_conditions"] == {"scoring_timeout_reached": 4}
    assert result["metadata"]["num_errors"] == 0
    assert all(output["reward"] == 0.0 for output in result["outputs"])


@vf.reward
async def slow_group_reward(states: list[vf.State]) -> list[float]:
    await asyncio.sleep(HANG_S)
    return [1.0] * len(states)


@vf.reward
def quick_reward(completion: list[dict[str, Any]]) -> float:
    return 0.5


async def test_a_group_scoring_timeout_ends_every_rollout_of_the_group(mock: MockModelServer, make_harness: Any) -> None:
    harness = make_harness(rewards=[quick_reward, slow_group_reward], scoring_timeout_seconds=0.2)
    states = await harness.run_group([vf.Task({"prompt": "a"}), vf.Task({"prompt": "b"})])

    assert [state["stop_condition"] for state in states] == ["scoring_timeout_reached"] * 2
    assert [state["reward"] for state in states] == [0.5, 0.5]  # the rollout rewards given before the timeout stay
    assert all(state["error"] is None for state in states)


@pytest.mark.parametrize("field", ["timeout_seconds", "setup_timeout_seconds", "scoring_timeout_seconds"])
@pytest.mark.parametrize("value", [0, -1, True, "30", float("inf"), float("nan"), 1e12])
def test_a_bad_timeout_is_one_config_error(field: str, value: Any) -> None:
    with pytest.raises(vf.ConfigError, match=f"field '{field}'") as error:
        vf.Harness(**{field: value})
    assert "\n" not in str(error.value)


def test_v1_eval_refuses_a_bad_timeout_in_one_line(tmp_path: Path) -> None:
    done = run_eval(tmp_path, "-b", "http://127.0.0.1:9/v1", "-m", "m", "--harness.scoring_timeout_seconds", "-1")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "scoring_timeout_seconds" in lines[0], done.stderr


# -- tool output truncation ------------------------------------------------------------------

MEGABYTE = 1_000_000
MCP_SERVER = str(ROOT / "tests" / "tools" / "mcp_server.py")


def big_output(size: int) -> str:
    """Return a long text.

    Args:
        size: how many characters
    """
    return "x" * (size - 3) + "END"


def assert_reached_the_model_truncated(content: Any, limit: int = 20_000) -> None:
    """What the mock received as the tool result: the head, the marker and the tail; never the whole megabyte."""
    text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
    marker = f"\n... [truncated {MEGABYTE - limit} of {MEGABYTE} characters] ...\n"
    assert text == "x" * (limit // 2) + marker + "x" * (limit // 2 - 3) + "END", (len(text), text[-80:])


def last_tool_message(request: Any) -> dict[str, Any]:
    return next(message for message in reversed(request.messages) if message.get("role") == "tool")


async def test_base_loop_truncates_a_megabyte_tool_result(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("big_output", {"size": MEGABYTE}), Reply.text("done"))
    state = await make_harness(toolsets=[vf.Toolset([big_output])]).run({"prompt": "go"})

    assert state["error"] is None and len(mock.requests) == 2
    assert_reached_the_model_truncated(last_tool_message(mock.requests[1])["content"])


async def test_max_tool_output_is_configurable(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("big_output", {"size": MEGABYTE}), Reply.text("done"))
    await make_harness(toolsets=[vf.Toolset([big_output])], max_tool_output=100).run({"prompt": "go"})
    assert_reached_the_model_truncated(last_tool_message(mock.requests[1])["content"], limit=100)


async def test_classic_tool_env_truncates_a_megabyte_tool_result(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.script(Reply.tool("big_output", {"size": MEGABYTE}), Reply.text("done"))
    env = vf.ToolEnv(tools=[big_output], dataset=[{"question": "go", "answer": "done"}])
    state = await env.rollout({"question": "go", "answer": "done", "example_id": 0}, client_config, "m")

    assert state["error"] is None and len(mock.requests) == 2
    assert_reached_the_model_truncated(last_tool_message(mock.requests[1])["content"])


async def test_a_real_mcp_servers_megabyte_result_is_truncated(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("echo", {"text": big_output(MEGABYTE)}), Reply.text("done"))
    server = vf.MCPTool(sys.executable, [MCP_SERVER, "--marker", "v1-test-budgets-truncation"])
    state = await make_harness(toolsets=[vf.Toolset([server])]).run({"prompt": "go"})

    assert state["error"] is None and len(mock.requests) == 2
    assert_reached_the_model_truncated(last_tool_message(mock.requests[1])["content"])


MCP_ROUTE_AGENT = """
import json, os, urllib.request, openai
client = openai.OpenAI(max_retries=0)
messages = [{"role": "user", "content": "go"}]
answer = client.chat.completions.create(model="x", messages=messages)
call = answer.choices[0].message.tool_calls[0]
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": call.function.name, "arguments": json.loads(call.function.arguments)}}
request = urllib.request.Request(os.environ["V1_MCP_URL"], data=json.dumps(body).encode(), method="POST",
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=600) as reply:
    result = json.loads(reply.read())["result"]
text = "".join(block["text"] for block in result["content"])
messages += [answer.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": text}]
client.chat.completions.create(model="x", messages=messages)
"""


async def test_the_endpoints_mcp_route_truncates_a_megabyte_tool_result(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("big_output", {"size": MEGABYTE}), Reply.text("done"))
    program = {"command": [sys.executable, "agent.py"], "files": {"agent.py": MCP_ROUTE_AGENT}}
    state = await make_harness(program=program, toolsets=[vf.Toolset([big_output])]).run({"prompt": "go"})

    assert state["error"] is None and state["program_result"]["exit_code"] == 0, state["program_result"]
    assert len(mock.requests) == 2
    assert_reached_the_model_truncated(last_tool_message(mock.requests[1])["content"])
    [made] = state["trajectory"][0]["extras"]["mcp_tool_calls"]
    assert_reached_the_model_truncated(made["content"])


def test_truncation_keeps_images_and_cuts_text_parts() -> None:
    from v1.tools._toolbox import truncate_tool_output

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    parts = [{"type": "text", "text": "a" * 6}, image, {"type": "text", "text": "b" * 6}]
    assert truncate_tool_output(parts, 8) == [
        {"type": "text", "text": "a" * 6},
        image,
        {"type": "text", "text": "bb"},
        {"type": "text", "text": "\n... [truncated 4 of 12 characters] ...\n"},
    ]
    assert truncate_tool_output(parts, 12) is parts
