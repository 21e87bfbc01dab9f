"""`Env` against the mock model server over real HTTP: generate, evaluate, run_group, retries, limits."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply

ROWS = [{"question": text, "answer": text[::-1]} for text in ("abc", "hello", "mock", "group", "score")]


@vf.reward
def reversed_exactly(completion: list[dict[str, Any]], answer: str) -> float:
    return float(completion[-1]["content"] == answer)


@vf.metric
def length(completion: list[dict[str, Any]]) -> float:
    return float(len(completion[-1]["content"] or ""))


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


def make_env(**taskset: Any) -> vf.Env:
    taskset.setdefault("source", ROWS)
    return vf.Env(vf.Taskset(taskset_id="rev", rewards=[reversed_exactly], metrics=[length], **taskset))


async def test_generate_returns_json_outputs_and_metadata(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    env = make_env()
    result = await env.generate(env.eval_rows(3), client_config, "m", rollouts_per_example=2, state_columns=["model"])
    outputs, meta = result["outputs"], result["metadata"]
    assert json.loads(json.dumps(result)) == result
    assert [(o["example_id"], o["rollout_index"]) for o in outputs] == [(e, i) for e in range(3) for i in range(2)]
    first = outputs[0]
    assert first["completion"][-1]["content"] == "cba" and first["answer"] == "cba"
    assert first["reward"] == 1.0 and first["metrics"] == {"reversed_exactly": 1.0, "length": 3.0}
    assert first["advantage"] == 0.0 and first["error"] is None and first["attempts"] == 1
    assert first["model"] == "m"  # a state column
    assert first["trajectory"][0]["completion"][0]["content"] == "cba"
    assert meta["num_examples"] == 3 and meta["rollouts_per_example"] == 2 and meta["num_rollouts"] == 6
    assert meta["avg_reward"] == 1.0 and meta["avg_metrics"] == {"length": 4.0, "reversed_exactly": 1.0}
    assert meta["pass_at_k"] == {"1": 1.0, "2": 1.0} and meta["pass_all_k"] == {"1": 1.0, "2": 1.0}
    assert meta["base_url"] == client_config.api_base_url and meta["model"] == "m" and meta["env_id"] == "rev"
    assert meta["usage"]["input_tokens"] > 0
    assert meta["version_info"]["vf_version"] == vf.__version__
    assert meta["scoring"]["rollout"] == ["reversed_exactly", "length"]


async def test_a_failing_rollout_records_its_error_and_the_rest_finish(
    mock: MockModelServer, client_config: vf.ClientConfig
) -> None:
    mock.responder = lambda request: Reply.fail(400, "bad prompt") if request.last_user_text == "mock" else reverser(request)
    env = make_env()
    result = await env.evaluate(client_config, "m", num_examples=4, rollouts_per_example=2)
    failed = [o for o in result["outputs"] if o["error"]]
    assert {o["example_id"] for o in failed} == {2} and len(failed) == 2
    # the upstream refused the request itself (400): recorded with its own type, never retried
    assert failed[0]["error"]["type"] == "ModelRequestError" and "bad prompt" in failed[0]["error"]["message"]
    assert failed[0]["stop_condition"] == "has_error"
    assert sum(1 for o in result["outputs"] if o["reward"] == 1.0) == 6
    assert result["metadata"]["avg_error"] == 0.25 and result["metadata"]["error_types"] == {"ModelRequestError": 2}


async def test_client_level_retries_are_counted_by_type_in_outputs_and_metadata(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("v1.clients._base.RETRY_WAIT_INITIAL", 0.001)
    mock.responder = reverser
    mock.script(Reply.fail(503, "overloaded"), Reply.fail(429, "slow down", retry_after=0.01), Reply.failing("malformed_json"))
    env = make_env()
    config = vf.ClientConfig(api_base_url=mock.url, max_retries=3)
    result = await env.generate(env.eval_rows(1), config, "m")
    (only,) = result["outputs"]
    assert only["error"] is None and only["attempts"] == 1 and only["reward"] == 1.0
    assert only["model_retries"] == {"InternalServerError": 1, "RateLimitError": 1, "InvalidModelResponseError": 1}
    assert result["metadata"]["num_model_retries"] == 3 and result["metadata"]["num_retries"] == 0


async def test_retries_are_decided_by_error_type(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    mock.script(Reply.fail(503, "overloaded"))  # one upstream failure: a ModelError, retryable
    env = make_env()
    result = await env.generate(env.eval_rows(1), client_config, "m", max_retries=2)
    (only,) = result["outputs"]
    assert only["error"] is None and only["attempts"] == 2 and only["reward"] == 1.0
    assert result["metadata"]["num_retries"] == 1

    def program_fails(task: vf.Task, state: vf.State) -> None:
        raise ValueError("a bug in the program")

    buggy = vf.Env(vf.Taskset(source=ROWS), vf.Harness(program=program_fails))
    result = await buggy.generate(buggy.eval_rows(1), client_config, "m", max_retries=2)
    assert result["outputs"][0]["attempts"] == 1 and result["outputs"][0]["error"]["type"] == "ValueError"
    assert vf.env.is_retryable({"type": "SandboxError"}) and not vf.env.is_retryable({"type": "OverlongPromptError"})


def test_retry_decisions_follow_the_error_classes() -> None:
    """Retryable means the named v1.Error class says so; an unknown or non-v1 name never is."""
    for cls in (vf.ModelError, vf.InvalidModelResponseError, vf.EndpointError, vf.SandboxError):
        assert cls.retryable and vf.env.is_retryable({"type": cls.__name__})
    for cls in (vf.OverlongPromptError, vf.ModelRequestError, vf.ConfigError, vf.ToolError, vf.ProgramError, vf.TaskError):
        assert not cls.retryable and not vf.env.is_retryable({"type": cls.__name__})
    assert not vf.env.is_retryable({"type": "InfrastructureError"})  # named once, never defined
    assert not vf.env.is_retryable({"type": "ValueError"}) and not vf.env.is_retryable(None)


async def test_max_concurrent_bounds_rollouts_in_flight_across_groups(client_config: vf.ClientConfig) -> None:
    in_flight, peak, lock = 0, 0, threading.Lock()

    async def counting(request: MockRequest) -> Reply:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        with lock:
            in_flight -= 1
        return reverser(request)

    async with MockModelServer(counting) as server:
        env = make_env()
        client = vf.ClientConfig(api_base_url=server.url, max_retries=0)
        result = await env.generate(env.eval_rows(5), client, "m", rollouts_per_example=2, max_concurrent=4)
    assert len(result["outputs"]) == 10 and peak <= 4
    assert peak >= 2  # groups did run side by side


async def test_independent_scoring_says_what_runs(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    seen_groups: list[int] = []

    @vf.reward
    def group_size(completions: list[Any]) -> list[float]:
        seen_groups.append(len(completions))
        return [float(len(completions))] * len(completions)

    env = vf.Env(vf.Taskset(source=ROWS, rewards=[reversed_exactly, group_size]))
    grouped = await env.generate(env.eval_rows(2), client_config, "m", rollouts_per_example=3)
    assert {o["metrics"]["group_size"] for o in grouped["outputs"]} == {3.0}
    alone = await env.generate(env.eval_rows(2), client_config, "m", rollouts_per_example=3, independent_scoring=True)
    assert {o["metrics"]["group_size"] for o in alone["outputs"]} == {1.0}
    assert {o["advantage"] for o in alone["outputs"]} == {0.0}
    assert seen_groups == [3, 3] + [1] * 6
    scoring = alone["metadata"]["scoring"]
    assert scoring["group"] == ["group_size"] and "group_size" in scoring["note"] and "group of one" in scoring["note"]


async def test_run_group_for_a_training_worker(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    answers = iter(["olleh", "olleh", "hello", "olleX"])
    mock.responder = lambda request: Reply.text(next(answers))
    env = make_env()
    row = env.taskset.rows()[1]
    states = await env.run_group([row] * 4, client_config, "m", {"logprobs": True, "extra_body": {"return_token_ids": True}})
    rewards = [state["reward"] for state in states]
    assert sorted(rewards) == [0.0, 0.0, 1.0, 1.0]
    assert [state["advantage"] for state in states] == [r - 0.5 for r in rewards]
    for state in states:
        (step,) = state["trajectory"]
        assert step["reward"] == state["reward"] and step["advantage"] == state["advantage"]
        tokens = step["tokens"]
        assert tokens["completion_ids"] and len(tokens["completion_logprobs"]) == len(tokens["completion_ids"])
        assert tokens["prompt_ids"]
    assert all(request.body["logprobs"] is True for request in mock.requests)


async def test_round_robin_over_endpoint_configs(client_config: vf.ClientConfig) -> None:
    async with MockModelServer(reverser) as one, MockModelServer(reverser) as two:
        client = vf.ClientConfig(
            max_retries=0,
            endpoint_configs=[vf.EndpointClientConfig(api_base_url=s.url, max_retries=0) for s in (one, two)],
        )
        env = make_env()
        result = await env.generate(env.eval_rows(4), client, "m", rollouts_per_example=2)
        assert len(one.requests) == 4 and len(two.requests) == 4
        assert result["metadata"]["base_url"] == f"{one.url},{two.url}"


async def test_groups_and_rollouts_outside_generate_take_turns_over_the_endpoints() -> None:
    async with MockModelServer(reverser) as one, MockModelServer(reverser) as two:
        client = vf.ClientConfig(
            max_retries=0,
            endpoint_configs=[vf.EndpointClientConfig(api_base_url=s.url, max_retries=0) for s in (one, two)],
        )
        env = make_env()
        row = env.eval_rows(1)[0]
        for expected in ((3, 0), (3, 3), (6, 3), (6, 6)):  # a training worker's groups: each on one server, in turn
            states = await env.run_group([row] * 3, client, "m")
            assert all(state["reward"] == 1.0 for state in states)
            assert (len(one.requests), len(two.requests)) == expected
        await env.rollout(row, client, "m")
        await env.rollout(row, client, "m")
        assert (len(one.requests), len(two.requests)) == (7, 7)


async def test_an_endpoint_keeps_the_clients_retries_and_headers_it_does_not_set() -> None:
    async with MockModelServer(reverser) as one, MockModelServer(reverser) as two:
        client = vf.ClientConfig(
            max_retries=0,
            extra_headers={"X-Team": "a"},
            endpoint_configs=[
                vf.EndpointClientConfig(api_base_url=one.url),
                vf.EndpointClientConfig(api_base_url=two.url, extra_headers={"X-Node": "2"}),
            ],
        )
        one.script(Reply.fail(503))
        env = make_env()
        row = env.eval_rows(1)[0]
        (failed,) = await env.run_group([row], client, "m")
        assert failed["error"] is not None and len(one.requests) == 1  # the client's max_retries=0, not the endpoint default
        (state,) = await env.run_group([row], client, "m")
        assert state["reward"] == 1.0
        headers = {name.lower(): value for name, value in two.requests[0].headers.items()}
        assert headers["x-team"] == "a" and headers["x-node"] == "2"


def test_datasets_and_the_eval_split(caplog: pytest.LogCaptureFixture) -> None:
    env = make_env(eval_source=[{"question": "eval only", "answer": "ylno lave"}])
    assert env.get_eval_dataset()["question"] == ["eval only"]
    train = env.get_dataset(n=3, seed=1)
    assert len(train) == 3 and train["question"] == env.get_dataset(n=3, seed=1)["question"]
    assert env.get_dataset()["question"] == [row["question"] for row in ROWS]
    with caplog.at_level(logging.WARNING):
        fallback = make_env().get_eval_dataset(n=2)
    assert fallback["question"] == ["abc", "hello"]
    assert "no eval split" in caplog.text


def test_generate_sync_and_its_misuse(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    env = make_env()
    result = env.evaluate_sync(client_config, "m", num_examples=2)
    assert [o["reward"] for o in result["outputs"]] == [1.0, 1.0]

    async def inside_a_loop() -> None:
        env.generate_sync(env.eval_rows(1), client_config, "m")

    with pytest.raises(vf.ConfigError, match="can't run inside an event loop"):
        asyncio.run(inside_a_loop())


async def test_generate_needs_a_client_and_a_model() -> None:
    env = make_env()
    with pytest.raises(vf.ConfigError, match="no model client"):
        await env.generate(env.eval_rows(1), None, "m")
    with pytest.raises(vf.ConfigError, match="no model"):
        await env.generate(env.eval_rows(1), vf.ClientConfig(api_base_url="http://127.0.0.1:9/v1"), None)


async def test_generate_streams_to_a_results_folder(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    env = make_env()
    writer = vf.ResultsWriter(tmp_path / "run")
    result = await env.generate(env.eval_rows(3), client_config, "m", rollouts_per_example=2, results=writer, keep_outputs=False)
    assert result["outputs"] == []
    saved = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert sorted((o["example_id"], o["rollout_index"]) for o in saved) == [(e, i) for e in range(3) for i in range(2)]
    metadata = json.loads((tmp_path / "run" / "metadata.json").read_text())
    assert metadata["num_rollouts"] == 6 and metadata["path_to_save"] == str(tmp_path / "run")
    # Running again into the same folder redoes nothing: every group is already saved.
    mock.reset()
    again = await env.generate(
        env.eval_rows(3), client_config, "m", rollouts_per_example=2, results=vf.ResultsWriter(tmp_path / "run")
    )
    assert mock.requests == [] and again["metadata"]["num_rollouts"] == 6
    assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == 6


class LateWriter(vf.ResultsWriter):
    """A results folder on a slow disk: each write is on disk before its caller hears back (when the test says)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written = asyncio.Event()
        self.answer = asyncio.Event()

    async def write(self, outputs: Any) -> None:
        await super().write(outputs)
        self.written.set()
        await self.answer.wait()


async def test_a_cancelled_generate_counts_every_line_it_saved(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    env = make_env()
    writer = LateWriter(tmp_path / "run")
    run = asyncio.create_task(env.generate(env.eval_rows(1), client_config, "m", rollouts_per_example=2, results=writer))
    await writer.written.wait()  # the group's lines are on disk; its write has not returned yet
    run.cancel()  # Ctrl-C now
    for _ in range(10):  # the cancellation reaches the unit waiting for its write
        await asyncio.sleep(0)
    writer.answer.set()
    with pytest.raises(asyncio.CancelledError):
        await run
    saved = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert len(saved) == 2
    assert json.loads((tmp_path / "run" / "metadata.json").read_text())["num_rollouts"] == 2


async def test_resume_under_independent_scoring_redoes_single_rollouts(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    env = make_env()
    run = tmp_path / "run"
    kwargs: dict[str, Any] = {"rollouts_per_example": 3, "independent_scoring": True, "keep_outputs": False}
    first = await env.generate(env.eval_rows(2), client_config, "m", results=vf.ResultsWriter(run), **kwargs)
    lines = (run / "results.jsonl").read_text().splitlines()
    (run / "results.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][:30])  # one lost, one half-written
    mock.reset()
    again = await env.generate(env.eval_rows(2), client_config, "m", results=vf.ResultsWriter(run), **kwargs)
    assert len(mock.requests) == 2  # only the two missing rollouts ran again
    saved = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert sorted((o["example_id"], o["rollout_index"]) for o in saved) == [(e, i) for e in range(2) for i in range(3)]
    aggregates = ("avg_reward", "avg_metrics", "pass_at_k", "pass_all_k", "num_rollouts", "usage")
    assert {k: again["metadata"][k] for k in aggregates} == {k: first["metadata"][k] for k in aggregates}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


async def test_a_client_object_and_the_tools_in_metadata(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.script(Reply.tool("add", {"a": 2, "b": 3}), Reply.text("5"))
    env = vf.Env(
        vf.Taskset(source=[{"question": "2+3?", "answer": "5"}], toolsets=[vf.Toolset([add])], rewards=[reversed_exactly])
    )
    client = vf.OpenAIChatCompletionsClient(client_config)
    try:
        result = await env.generate(env.eval_rows(), client, "m")
    finally:
        await client.close()
    (only,) = result["outputs"]
    assert only["stop_condition"] == "no_tools_called" and only["completion"][1] == {
        "role": "tool",
        "tool_call_id": only["completion"][0]["tool_calls"][0]["id"],
        "content": "5",
    }
    assert only["tool_defs"][0]["name"] == "add"
    (tool,) = result["metadata"]["tools"]
    assert tool["name"] == "add" and tool["parameters"]["properties"]["a"]["description"] == "the first addend"


@pytest.mark.parametrize("uvloop_setting", ["1", "0"])
def test_generate_sync_runs_on_uvloop_unless_turned_off(
    mock: MockModelServer, client_config: vf.ClientConfig, monkeypatch: pytest.MonkeyPatch, uvloop_setting: str
) -> None:
    monkeypatch.setenv("V1_UVLOOP", uvloop_setting)
    loops: list[str] = []

    async def program(task: vf.Task, state: vf.State) -> None:
        loops.append(type(asyncio.get_running_loop()).__module__)

    env = vf.Env(taskset=vf.Taskset(source=ROWS), harness=vf.Harness(program=program))
    result = env.evaluate_sync(client_config, "m", num_examples=2)
    assert [o["error"] for o in result["outputs"]] == [None, None]
    assert set(loops) == ({"uvloop"} if uvloop_setting == "1" else {"asyncio.unix_events"})
