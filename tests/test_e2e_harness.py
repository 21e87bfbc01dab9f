"""End to end: `harness.run(task)` for every program form, against the mock model over real HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any, ClassVar

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


@vf.reward
def exact_answer(completion: list[dict[str, Any]], answer: str) -> float:
    return float(completion[-1]["content"] == answer)


@vf.metric
def turns(trajectory: list[dict[str, Any]]) -> float:
    return float(len(trajectory))


def assert_complete_state(state: vf.State) -> None:
    """What every finished rollout must carry, and serialize."""
    assert state["is_completed"] is True
    assert state["trajectory"], "no trajectory recorded"
    assert state["completion"], "no completion rendered"
    assert isinstance(state["reward"], float)
    assert isinstance(state["metrics"], dict)
    assert state["timing"]["total"] > 0
    assert state["timing"]["model"]["duration"] > 0
    assert state["token_usage"]["input_tokens"] > 0 and state["token_usage"]["output_tokens"] > 0
    assert json.loads(json.dumps(state)) == dict(state)


async def test_base_loop_with_tools(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("add", {"a": 2, "b": 3}), Reply.text("5"))
    harness = make_harness(toolsets=[vf.Toolset([add])], rewards=[exact_answer], metrics=[turns], system_prompt="Use tools.")
    state = await harness.run({"prompt": "What is 2+3?", "answer": "5"})

    assert_complete_state(state)
    assert state["stop_condition"] == "no_tools_called"
    assert state["reward"] == 1.0 and state["metrics"] == {"exact_answer": 1.0, "turns": 2.0}
    assert [m["role"] for m in state["completion"]] == ["assistant", "tool", "assistant"]
    assert state["completion"][1]["content"] == "5"
    # The model saw the tool schema and the system prompt; the second call saw the tool result.
    first, second = mock.requests
    assert first.body["messages"][0] == {"role": "system", "content": "Use tools."}
    assert first.tools[0]["function"]["name"] == "add"
    assert first.tools[0]["function"]["parameters"]["properties"]["a"]["description"] == "the first addend"
    assert second.last_message == {"role": "tool", "tool_call_id": state["completion"][0]["tool_calls"][0]["id"], "content": "5"}
    assert state["trajectory"][1]["prompt"][-1]["role"] == "tool"
    assert state["timing"]["env"]["duration"] > 0


async def test_base_loop_single_turn_without_tools(mock: MockModelServer, make_harness: Any) -> None:
    state = await make_harness(rewards=[exact_answer]).run({"prompt": "echo me", "answer": "echo me"})
    assert_complete_state(state)
    assert state["stop_condition"] == "final_response"
    assert len(state["trajectory"]) == 1 and state["reward"] == 1.0


async def test_base_loop_stops_at_max_turns(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = lambda request: Reply.tool("add", {"a": 1, "b": 1})
    state = await make_harness(toolsets=[vf.Toolset([add])], max_turns=3).run({"prompt": "loop forever"})
    assert state["stop_condition"] == "max_turns_reached" and state["error"] is None
    assert len(state["trajectory"]) == 3 and len(mock.requests) == 3


async def test_task_max_turns_overrides_harness(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = lambda request: Reply.tool("add", {"a": 1, "b": 1})
    state = await make_harness(toolsets=[vf.Toolset([add])], max_turns=5).run({"prompt": "go", "max_turns": 2})
    assert state["stop_condition"] == "max_turns_reached" and len(state["trajectory"]) == 2


async def test_user_stop_condition(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = lambda request: Reply.tool("add", {"a": 1, "b": 1})

    @vf.stop
    def two_tool_results(state: vf.State) -> bool:
        return sum(1 for m in state.get("completion") or [] if m["role"] == "tool") >= 2 or len(state["trajectory"]) >= 2

    state = await make_harness(toolsets=[vf.Toolset([add])], stops=[two_tool_results]).run({"prompt": "go"})
    assert state["stop_condition"] == "two_tool_results" and len(state["trajectory"]) == 2


async def test_a_stop_condition_refuses_a_programs_own_next_call(mock: MockModelServer, make_harness: Any) -> None:
    """A program that never checks `@stop` itself is stopped by the endpoint, which asks before each call."""

    @vf.stop
    def two_calls(state: vf.State) -> bool:
        return len(state["trajectory"]) >= 2

    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        for _ in range(5):
            await client.chat.completions.create(model="m", messages=list(state["prompt"]))

    state = await make_harness(program=program, stops=[two_calls], max_turns=10).run({"prompt": "go"})
    assert state["stop_condition"] == "two_calls" and len(state["trajectory"]) == 2 and len(mock.requests) == 2
    assert state["error"] is None


async def test_callable_program(mock: MockModelServer, make_harness: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        reply = await client.chat.completions.create(model="ignored", messages=list(state["prompt"]))
        state["answer_seen"] = reply.choices[0].message.content

    state = await make_harness(program=program, rewards=[exact_answer]).run({"prompt": "hello", "answer": "hello"})
    assert_complete_state(state)
    assert state["answer_seen"] == "hello" and state["reward"] == 1.0
    assert state["stop_condition"] == "state_done"
    assert mock.requests[0].body["model"] == "test-model", "the endpoint must call the harness's model"


def test_sync_callable_program_uses_sync_client(mock: MockModelServer, make_harness: Any) -> None:
    def program(task: vf.Task, state: vf.State) -> None:
        reply = state.get_client(sync=True).chat.completions.create(model="x", messages=list(state["prompt"]))
        state["said"] = reply.choices[0].message.content

    state = asyncio.run(make_harness(program=program).run({"prompt": "from a thread"}))
    assert state["said"] == "from a thread" and len(state["trajectory"]) == 1


async def test_fn_ref_program(mock: MockModelServer, make_harness: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_agent.py").write_text(
        textwrap.dedent(
            """
            async def run(task, state):
                client = state.get_client()
                for text in ("one", "two"):
                    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    state = await make_harness(program={"fn": "my_agent:run"}).run({"prompt": "ignored"})
    assert_complete_state(state)
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["one", "two"]


async def test_program_config_rejects_process_fields_in_process_and_bad_refs(make_harness: Any) -> None:
    with pytest.raises(vf.NotSupportedError, match=r"\['env'\] need a process"):
        make_harness(program={"env": {"A": "1"}})
    with pytest.raises(vf.ConfigError, match="cannot import module 'no_such_module_xyz'"):
        make_harness(program={"fn": "no_such_module_xyz:run"})


async def test_sdk_and_raw_httpx_programs_record_the_same_trajectory(mock: MockModelServer, make_harness: Any) -> None:
    messages = [{"role": "user", "content": "same either way"}]
    tools = [
        {
            "type": "function",
            "function": {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    mock.responder = lambda request: Reply.tool("add", {"a": 1, "b": 2}, content="calling")

    async def with_sdk(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=messages, tools=tools)

    async def with_httpx(task: vf.Task, state: vf.State) -> None:
        config = state.get_endpoint_config()
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            reply = await http.post(
                f"{config['base_url']}/chat/completions",
                headers={"Authorization": f"Bearer {config['api_key']}"},
                json={"model": config["model"], "messages": messages, "tools": tools},
            )
            reply.raise_for_status()

    sdk_state = await make_harness(program=with_sdk).run({"prompt": "x"})
    raw_state = await make_harness(program=with_httpx).run({"prompt": "x"})

    def comparable(state: vf.State) -> list[dict[str, Any]]:
        steps = []
        for step in state["trajectory"]:
            response = {k: v for k, v in step["response"].items() if k not in ("id", "created")}
            steps.append(
                {"prompt": step["prompt"], "completion": step["completion"], "response": response, "tokens": step["tokens"]}
            )
        return steps

    assert comparable(sdk_state) == comparable(raw_state)
    assert sdk_state["trajectory"][0]["completion"][0]["tool_calls"][0]["function"]["name"] == "add"
    assert mock.requests[0].body["tools"] == mock.requests[1].body["tools"]


async def test_failing_rollout_records_error_and_others_finish(mock: MockModelServer, make_harness: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        if task["info"]["fail"]:
            raise RuntimeError("program exploded")
        await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]))

    harness = make_harness(program=program)
    states = await asyncio.gather(*(harness.run({"prompt": f"task {i}", "info": {"fail": i == 1}}) for i in range(4)))
    failed = states[1]
    assert failed["stop_condition"] == "has_error"
    assert failed["error"] == {"type": "RuntimeError", "message": "program exploded", "where": "program"}
    json.dumps(failed)
    for state in states[:1] + states[2:]:
        assert state["error"] is None and len(state["trajectory"]) == 1


async def test_upstream_failure_is_recorded(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.fail(500, "upstream is down"))
    state = await make_harness().run({"prompt": "hi"})
    assert state["stop_condition"] == "has_error"
    assert state["error"]["type"] == "ModelError" and "upstream is down" in state["error"]["message"]
    assert state["trajectory"] == []


async def test_reward_judge_calls_model_through_endpoint_after_program(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = lambda request: Reply.text("YES" if "Judge" in request.last_user_text else "an answer")

    @vf.reward
    async def judge(state: vf.State, completion: list[dict[str, Any]]) -> float:
        verdict = await state.get_client().chat.completions.create(
            model="judge", messages=[{"role": "user", "content": f"Judge: {completion[-1]['content']}"}]
        )
        return float(verdict.choices[0].message.content == "YES")

    cleanup_calls: list[str] = []

    @vf.cleanup
    async def cleanup_uses_model(state: vf.State) -> None:
        reply = await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "bye"}])
        cleanup_calls.append(reply.choices[0].message.content)

    state = await make_harness(rewards=[judge], cleanups=[cleanup_uses_model]).run({"prompt": "question"})
    assert state["reward"] == 1.0 and state["error"] is None
    assert cleanup_calls == ["an answer"]
    assert len(state["trajectory"]) == 1, "judge and cleanup calls are not policy turns"
    with pytest.raises(vf.EndpointError, match="no open endpoint"):
        state.get_client()


class CountingTaskset(vf.Taskset):
    group_cleanups: ClassVar[list[int]] = []

    @vf.cleanup
    def record_group(self, states: list[vf.State]) -> None:
        self.group_cleanups.append(len(states))

    @vf.reward
    def length(self, completion: list[dict[str, Any]]) -> float:
        return float(len(completion[-1]["content"] or "")) if completion else 0.0


async def test_run_group_scores_and_cleans_up_even_when_a_rollout_fails(
    mock: MockModelServer, client_config: vf.ClientConfig
) -> None:
    mock.responder = lambda request: Reply.text("x" * (len(request.body["messages"]) + len(mock.requests)))
    taskset = CountingTaskset(source=[{"question": "q"}])
    CountingTaskset.group_cleanups = []

    async def program(task: vf.Task, state: vf.State) -> None:
        if state is states[1]:  # the second rollout of the group, whichever the loop starts first
            raise ValueError("one rollout of the group breaks")
        await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]))

    harness = vf.Harness(program=program, client=client_config, model="m", taskset=taskset)
    tasks, states = await taskset.init_group(taskset.tasks()[0], 3)
    states = await harness.run_group(tasks, states)

    assert CountingTaskset.group_cleanups == [3]
    assert [s["error"] is not None for s in states] == [False, True, False]
    rewards = [s["reward"] for s in states]
    assert sum(s["advantage"] for s in states) == pytest.approx(0.0)
    assert states[0]["advantage"] == pytest.approx(rewards[0] - sum(rewards) / 3)
    assert all(step["advantage"] == s["advantage"] for s in states for step in s["trajectory"])
    for state in states:
        json.dumps(state)


async def test_group_reward_function(mock: MockModelServer, make_harness: Any) -> None:
    @vf.reward(weight=0.5)
    def rank(completions: list[list[dict[str, Any]]]) -> list[float]:
        lengths = [len(c[-1]["content"]) for c in completions]
        return [float(length == max(lengths)) for length in lengths]

    mock.responder = lambda request: Reply.text({"first": "short", "second": "much longer answer"}[request.last_user_text])
    harness = make_harness(rewards=[rank])
    states = await harness.run_group([vf.Task({"prompt": "first"}), vf.Task({"prompt": "second"})])
    assert [s["reward"] for s in states] == [0.0, 0.5]
    assert [s["advantage"] for s in states] == [-0.25, 0.25]


async def test_system_prompt_strategies(mock: MockModelServer, make_harness: Any) -> None:
    task = {"prompt": "hi", "system_prompt": "task rules"}
    expectations = {
        "HT": ["harness rules", "task rules"],
        "TH": ["task rules", "harness rules"],
        "H_OR_T": ["harness rules"],
        "T_OR_H": ["task rules"],
        "H": ["harness rules"],
        "T": ["task rules"],
    }
    for strategy, expected in expectations.items():
        state = await make_harness(system_prompt="harness rules", system_prompt_strategy=strategy).run(task)
        assert [m["content"] for m in state["prompt"] if m["role"] == "system"] == expected, strategy
    rejected = await make_harness(system_prompt="harness rules", system_prompt_strategy="REJECT").run(task)
    assert rejected["error"]["type"] == "ConfigError" and "REJECT" in rejected["error"]["message"]
    only_task = await make_harness(system_prompt_strategy="REJECT").run(task)
    assert only_task["error"] is None and only_task["prompt"][0]["content"] == "task rules"


async def test_task_tool_visibility(mock: MockModelServer, make_harness: Any) -> None:
    def sub(a: int, b: int) -> int:
        """Subtract."""
        return a - b

    harness = make_harness(toolsets=[vf.Toolset([add, sub])])
    state = await harness.run({"prompt": "x", "tools": {"hide": ["sub"]}})
    assert [t["function"]["name"] for t in mock.requests[-1].tools] == ["add"]
    assert [t["name"] for t in state["tool_defs"]] == ["add"]
    requests_before = len(mock.requests)
    state = await harness.run({"prompt": "x", "tools": {"show": ["nope"]}})
    assert state["stop_condition"] == "has_error" and state["error"]["type"] == "ConfigError"
    assert "unknown tool(s) ['nope']" in state["error"]["message"] and state["error"]["where"] == "task"
    assert len(mock.requests) == requests_before, "a task that can't be resolved never reaches the model"


async def test_harness_without_model_or_client_fails_clearly(client_config: vf.ClientConfig) -> None:
    with pytest.raises(vf.ConfigError, match="no model client"):
        await vf.Harness(model="m").run({"prompt": "x"})
    with pytest.raises(vf.ConfigError, match="no model"):
        await vf.Harness(client=client_config).run({"prompt": "x"})


async def test_timeout_stops_rollout(mock: MockModelServer, make_harness: Any) -> None:
    async def slow(task: vf.Task, state: vf.State) -> None:
        await asyncio.sleep(10)

    state = await make_harness(program=slow, timeout_seconds=0.2).run({"prompt": "x"})
    assert state["stop_condition"] == "timeout_reached" and state["error"] is None


async def test_async_openai_object_as_client(mock: MockModelServer) -> None:
    from openai import AsyncOpenAI

    upstream = AsyncOpenAI(base_url=mock.url, api_key="k", max_retries=0)
    state = await vf.Harness(client=upstream, model="m").run({"prompt": "through a user client"})
    assert state["completion"][-1]["content"] == "through a user client"
    await upstream.close()


def test_demo_command_runs_offline() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "v1.cli", "demo", "--json", "-n", "3", "-r", "2"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert result.returncode == 0, result.stderr
    states = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(states) == 6
    assert all(s["error"] is None and 0.0 <= s["reward"] <= 1.0 and s["trajectory"] for s in states)
    assert {s["example_id"] for s in states} == {0, 1, 2}


def _responder_sees_request(request: MockRequest) -> Reply:
    return Reply.text(str(request.body.get("temperature")))


async def test_harness_sampling_args_reach_upstream(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = _responder_sees_request

    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]), temperature=1.5, top_p=0.5)

    await make_harness(program=program, sampling_args={"temperature": 0.1}).run({"prompt": "x"})
    assert mock.requests[-1].body["temperature"] == 0.1, "harness sampling args win"
    assert mock.requests[-1].body["top_p"] == 0.5, "program params the harness does not set pass through"


async def test_program_crashing_after_its_own_stop_is_still_an_error(mock: MockModelServer, make_harness: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]))
        state.stop("my_reason")
        raise KeyError("bug after stopping")

    state = await make_harness(program=program).run({"prompt": "x"})
    assert state["stop_condition"] == "has_error"
    assert state["error"]["type"] == "KeyError" and state["error"]["where"] == "program"


async def test_cancelled_rollout_still_runs_cleanups_and_closes_its_endpoint(mock: MockModelServer, make_harness: Any) -> None:
    from v1.interception import get_endpoint

    started = asyncio.Event()
    cleaned: list[str] = []
    seen: dict[str, Any] = {}

    async def program(task: vf.Task, state: vf.State) -> None:
        seen["state"] = state
        started.set()
        await asyncio.sleep(30)

    @vf.cleanup
    def remember(state: vf.State) -> None:
        cleaned.append(state["trajectory_id"])

    rollout = asyncio.create_task(make_harness(program=program, cleanups=[remember]).run({"prompt": "x"}))
    await started.wait()
    rollout.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rollout
    state = seen["state"]
    assert cleaned == [state["trajectory_id"]]
    assert state["trajectory_id"] not in (await get_endpoint()).sessions
    json.dumps(state)


async def test_program_failing_on_an_overlong_prompt_ends_as_prompt_too_long(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.fail(400, "This model's maximum context length is 8192 tokens"))

    async def program(task: vf.Task, state: vf.State) -> None:
        await state.get_client().chat.completions.create(model="m", messages=list(state["prompt"]))

    state = await make_harness(program=program).run({"prompt": "a very long prompt"})
    assert state["stop_condition"] == "prompt_too_long" and state["is_truncated"] is True
    assert state["error"] is None, "the endpoint ended the rollout; the program's exception is a consequence"


async def test_program_failing_on_a_token_budget_ends_cleanly(mock: MockModelServer, make_harness: Any) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        client = state.get_client()
        for _ in range(5):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "four words of reply"}])

    for harness in (
        make_harness(program=program, max_total_completion_tokens=8),
        make_harness(program=program, config={"max_total_completion_tokens": 8}),
        make_harness(program=program, sampling_args={"max_total_completion_tokens": 8}),
    ):
        requests_before = len(mock.requests)
        state = await harness.run({"prompt": "x"})
        assert state["stop_condition"] == "max_total_completion_tokens_reached" and state["error"] is None
        assert len(state["trajectory"]) == 2
        assert all("max_total_completion_tokens" not in request.body for request in mock.requests[requests_before:])
