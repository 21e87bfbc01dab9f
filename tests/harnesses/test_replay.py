"""The replay harness: an eval saved to results.jsonl, replayed through the endpoint without a model, gives the same
steps, completions and rewards; a changed task or a missing record fails the rollout with ReplayDivergedError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from harnesses.replay import ReplayClient, ReplayDivergedError, ReplayHarness, load_records
from v1.testing import MockModelServer, Reply

ROWS = [{"prompt": "add 2 and 3", "answer": "5", "example_id": 0}, {"prompt": "add 4 and 4", "answer": "8", "example_id": 1}]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@vf.reward
def exact(completion: Any, answer: str) -> float:
    return float(completion[-1]["content"] == answer)


def make_env(harness: vf.Harness, rows: list[dict[str, Any]] = ROWS) -> vf.Env:
    taskset = vf.Taskset(source=rows, toolsets=[vf.Toolset([add])], rewards=[exact], taskset_id="adder")
    return vf.Env(taskset, harness)


def answers(request: Any) -> Reply:
    if request.messages[-1]["role"] == "tool":
        return Reply.text(request.messages[-1]["content"] if "3" in request.messages[0]["content"] else "wrong")
    numbers = [int(word) for word in request.messages[-1]["content"].split() if word.isdigit()]
    return Reply.tool("add", {"a": numbers[0], "b": numbers[1]})


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    run = tmp_path_factory.mktemp("run")
    with MockModelServer() as mock:
        mock.responder = answers
        harness = vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="mock-model")
        outputs = make_env(harness).evaluate_sync(rollouts_per_example=2, results=vf.ResultsWriter(run))["outputs"]
    return run, [dict(output) for output in outputs]


def key(output: dict[str, Any]) -> tuple[Any, int]:
    return output["example_id"], output["rollout_index"]


def test_a_replay_records_the_same_steps_completions_and_rewards(saved_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, saved = saved_run
    assert sorted(output["reward"] for output in saved) == [0.0, 0.0, 1.0, 1.0]
    replayed = make_env(ReplayHarness(config={"results": str(run)})).evaluate_sync(rollouts_per_example=2)["outputs"]
    by_key = {key(output): output for output in replayed}
    assert set(by_key) == {key(output) for output in saved}
    for original in saved:
        again = by_key[key(original)]
        assert again["error"] is None, again["error"]
        assert (again["completion"], again["reward"]) == (original["completion"], original["reward"])
        assert [(s["prompt"], s["completion"], s["response"]) for s in again["trajectory"]] == [
            (s["prompt"], s["completion"], s["response"]) for s in original["trajectory"]
        ]


def test_the_recording_answers_even_when_the_run_names_a_client(saved_run: tuple[Path, list[dict[str, Any]]]) -> None:
    """`Harness.rollout_client`: the replay's own client replaces the configured one for every rollout."""
    run, saved = saved_run
    with MockModelServer() as live:
        live.responder = lambda request: Reply.text("from the live model")
        harness = ReplayHarness(config={"results": str(run)}, client=vf.ClientConfig(api_base_url=live.url, max_retries=0))
        replayed = make_env(harness).evaluate_sync(rollouts_per_example=2)["outputs"]
    assert live.requests == []
    assert sorted((key(o), o["completion"]) for o in replayed) == sorted((key(o), o["completion"]) for o in saved)


async def test_a_changed_task_or_a_missing_record_diverges(saved_run: tuple[Path, list[dict[str, Any]]]) -> None:
    run, _ = saved_run
    harness = ReplayHarness(config={"results": str(run / "results.jsonl")})
    changed = [{**ROWS[0], "prompt": "add 2 and 30"}, {**ROWS[1], "example_id": 7}]
    first, missing = await make_env(harness, changed).run_group([changed[0]]) + await make_env(harness, changed).run_group(
        [changed[1]]
    )
    assert first["error"]["type"] == "ReplayDivergedError" and "prompt[0].content differs" in first["error"]["message"]
    assert missing["error"]["type"] == "ReplayDivergedError" and "example_id 7" in missing["error"]["message"]
    # the recording answers a call only with the saved step for that prompt
    client, state = ReplayClient(), vf.State.for_task({"prompt": "x"})
    steps = load_records(run)[(0, 0)]["trajectory"]
    client.expect(state["trajectory_id"], steps)
    response = await client.get_response(steps[0]["prompt"], "m", {}, state=state)
    assert response.model_dump(mode="json") == steps[0]["response"]
    with pytest.raises(ReplayDivergedError, match=r"step 0: the prompt differs from the saved one at prompt\[0\].content"):
        await client.get_response([{"role": "user", "content": "add 2 and 30"}], "m", {}, state=state)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "cannot read"),
        ("{", "line 1 is not JSON"),
        ('{"example_id": 1}', "no rollout_index"),
        ('{"rollout_index": 0}', "no trajectory"),
    ],
)
def test_bad_results_are_one_clear_config_error(tmp_path: Path, content: str | None, fragment: str) -> None:
    path = tmp_path / "results.jsonl"
    if content is not None:
        path.write_text(content + "\n")
    with pytest.raises(vf.ConfigError, match=fragment):
        ReplayHarness(config={"results": str(path)})
    assert issubclass(ReplayDivergedError, vf.Error)
