"""End to end: a run saved by `v1 eval` against the mock, then `v1 rescore` as a real process with other rewards.

The mock serves the policy and the judge (told apart by the model asked for); the rescore must send
the policy's model nothing.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply
from v1.view import RolloutIndex, find_runs

ROOT = Path(__file__).resolve().parent.parent
POLICY = "policy"
JUDGE = "judge"

SCORED = '''
import os

import v1 as vf


def rows():
    return [{"question": text, "answer": text[::-1]} for text in ("abc", "hello", "xy")]


def fewer_rows():
    return rows()[:2]


def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()


def exact(completion, answer):
    return float(bool(completion) and completion[-1]["content"] == answer)


def lenient(completion, answer):
    return float(bool(completion) and completion[-1]["content"].lower() == answer)


def broken(completion):
    raise KeyError("score")


def used_the_tool(trajectory):
    """1.0 when a model turn of the trajectory called `shout` (the tool calls as the run recorded them)."""
    calls = [call for step in trajectory for message in step["completion"] for call in message.get("tool_calls") or []]
    return float(any(call["function"]["name"] == "shout" for call in calls))


judge = vf.judge_reward(client={"api_base_url": os.environ["JUDGE_URL"], "max_retries": 0}, model="judge")
'''

CONFIG = """
[env.taskset]
taskset_id = "scored"
source = "scored:rows"

[[env.taskset.toolsets]]
name = "shouting"
tools = ["scored:shout"]

[[env.taskset.rewards]]
fn = "scored:exact"
weight = 1.0

[env.harness]
model = "policy"
max_turns = 4
"""


def policy_or_judge(request: MockRequest, verdicts: Iterator[str]) -> Reply:
    """The judge answers yes, no, yes, ...; the policy calls `shout`, then answers the reversal (upper case for 'hello')."""
    if request.body.get("model") == JUDGE:
        return Reply.text(next(verdicts))
    if request.last_message.get("role") != "tool":
        return Reply.tool("shout", {"text": request.last_user_text})
    text = request.last_user_text[::-1]
    return Reply.text(text.upper() if text == "olleh" else text)


@pytest.fixture
def server() -> Iterator[MockModelServer]:
    verdicts = itertools.cycle(["yes", "no", "yes", "yes", "no"])
    with MockModelServer(lambda request: policy_or_judge(request, verdicts), model=POLICY) as mock:
        yield mock


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scored.py").write_text(textwrap.dedent(SCORED))
    (tmp_path / "scored.toml").write_text(CONFIG)
    return tmp_path


def v1_cli(*args: str, cwd: Path, judge_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "JUDGE_URL": judge_url}
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S
    )


def policy_calls(mock: MockModelServer) -> int:
    return sum(1 for request in mock.requests if request.body.get("model") != JUDGE)


def outputs_of(run: Path) -> dict[tuple[Any, int], dict[str, Any]]:
    lines = (run / "results.jsonl").read_text().splitlines()
    return {(o["example_id"], o["rollout_index"]): o for o in map(json.loads, lines)}


def saved_eval(project: Path, server: MockModelServer) -> Path:
    result = v1_cli(
        "eval", "scored.toml", "-b", server.url, "-m", POLICY, "-n", "3", "-r", "2", "--output-dir", "evals",
        cwd=project, judge_url=server.url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = find_runs(project / "evals")
    assert sorted(o["reward"] for o in outputs_of(run).values()) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    return run


CHANGED = [
    "--taskset.rewards",
    json.dumps([{"fn": "scored:lenient", "weight": 1.0}, {"fn": "scored:used_the_tool", "weight": 0.5}]),
]


def test_rescore_gives_the_new_rewards_without_calling_the_policy(project: Path, server: MockModelServer) -> None:
    run = saved_eval(project, server)
    calls_before = policy_calls(server)
    assert calls_before == 12  # 6 rollouts, each a tool call and an answer
    result = v1_cli("rescore", str(run), "scored.toml", *CHANGED, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert result.returncode == 0, result.stderr
    assert policy_calls(server) == calls_before
    (new_run,) = find_runs(project / "re")
    new = outputs_of(new_run)
    assert len(new) == 6
    for key, output in new.items():
        assert output["metrics"] == {"lenient": 1.0, "used_the_tool": 1.0}, key  # the tool calls, as the run made them
        assert output["reward"] == 1.5
        assert output["previous_metrics"] == {"exact": output["previous_reward"]}
    assert sorted(o["previous_reward"] for o in new.values()) == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    old = outputs_of(run)
    assert all(new[key]["trajectory_id"] == old[key]["trajectory_id"] for key in old)
    metadata = json.loads((new_run / "metadata.json").read_text())
    assert metadata["rescored_from"] == str(run.resolve())
    assert metadata["avg_reward"] == 1.5 and metadata["previous"]["avg_reward"] == pytest.approx(4 / 6)
    assert metadata["env_id"] == "scored" and metadata["model"] == POLICY
    assert "avg reward 1.500 (was 0.667)" in result.stdout
    index = RolloutIndex(new_run / "results.jsonl")  # what `v1 view` reads: old and new side by side
    index.refresh()
    assert [index.read(i)["previous_reward"] for i in range(6)] and len(index.rows) == 6


def test_a_fixed_reward_clears_the_error_the_broken_one_recorded(project: Path, server: MockModelServer) -> None:
    broken = ["--taskset.rewards", json.dumps([{"fn": "scored:broken", "weight": 1.0}])]
    result = v1_cli("eval", "scored.toml", *broken, "-b", server.url, "-m", POLICY, "-n", "2", "-r", "1", "--output-dir", "evals",
                    cwd=project, judge_url=server.url)  # fmt: skip
    assert result.returncode == 1, result.stderr  # every rollout failed
    (run,) = find_runs(project / "evals")
    assert {output["error"]["where"] for output in outputs_of(run).values()} == {"reward:broken"}
    fixed = v1_cli("rescore", str(run), "scored.toml", *CHANGED, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert fixed.returncode == 0, fixed.stderr
    (new_run,) = find_runs(project / "re")
    for output in outputs_of(new_run).values():
        assert output["error"] is None and output["reward"] == 1.5
        assert output["previous_metrics"] == {"broken": 0.0}


def test_repeats_report_a_noisy_judges_spread(project: Path, server: MockModelServer) -> None:
    run = saved_eval(project, server)
    calls_before = policy_calls(server)
    judged = ["--taskset.rewards", json.dumps([{"fn": "scored:judge", "weight": 1.0}])]
    result = v1_cli(
        "rescore", str(run), "scored.toml", *judged, "-r", "3", "--output-dir", "re", cwd=project, judge_url=server.url
    )
    assert result.returncode == 0, result.stderr
    assert policy_calls(server) == calls_before
    assert sum(1 for request in server.requests if request.body.get("model") == JUDGE) == 18  # 6 rollouts x 3 repeats
    (new_run,) = find_runs(project / "re")
    spreads = [output["rescore_spread"]["judge"] for output in outputs_of(new_run).values()]
    assert all(len(spread["values"]) == 3 and set(spread["values"]) <= {0.0, 1.0} for spread in spreads)
    assert any(spread["std"] > 0 for spread in spreads)
    assert all(spread["min"] == min(spread["values"]) and spread["max"] == max(spread["values"]) for spread in spreads)
    assert "spread over 3 repeats (per rollout):" in result.stdout
    spread_lines = result.stdout.split("spread over 3 repeats (per rollout):\n", 1)[1].splitlines()
    assert spread_lines[0].startswith("  judge: mean ") and "std" in spread_lines[0]
    assert "min 0" in spread_lines[0] and "max 1" in spread_lines[0]


def test_a_judge_on_the_policys_own_model_is_refused_not_called(project: Path, server: MockModelServer) -> None:
    run = saved_eval(project, server)
    calls_before = len(server.requests)
    (project / "own.py").write_text("import v1 as vf\n\nown_judge = vf.judge_reward(name='own_judge')\n")
    own = ["--taskset.rewards", json.dumps([{"fn": "own:own_judge", "weight": 1.0}])]
    result = v1_cli("rescore", str(run), "scored.toml", *own, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert result.returncode == 0, result.stderr
    assert len(server.requests) == calls_before
    (new_run,) = find_runs(project / "re")
    for output in outputs_of(new_run).values():
        assert output["metrics"] == {"own_judge": 0.0}
        assert output["error"]["where"] == "reward:own_judge" and output["error"]["type"] == "EndpointError"


def test_missing_rows_and_old_lines_are_one_line_each_the_rest_rescored(project: Path, server: MockModelServer) -> None:
    run = saved_eval(project, server)
    lines = (run / "results.jsonl").read_text().splitlines()
    old_format = json.loads(lines[0])
    del old_format["trajectory"]
    (run / "results.jsonl").write_text("\n".join([json.dumps(old_format), *lines[1:]]) + "\n")
    fewer = ["--taskset.source", "scored:fewer_rows"]
    result = v1_cli("rescore", str(run), "scored.toml", *fewer, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert result.returncode == 0, result.stderr
    problems = [line for line in result.stderr.splitlines() if line.startswith("v1 rescore: ")]
    assert sorted(problems) == [
        "v1 rescore: example 2 rollout 0: scored has no task with this example_id now; left out",
        "v1 rescore: example 2 rollout 1: scored has no task with this example_id now; left out",
        "v1 rescore: results.jsonl line 1: no trajectory (an older v1's format?); left out",
    ]
    (new_run,) = find_runs(project / "re")
    assert len(outputs_of(new_run)) == 3
    assert "3 rollouts of" in result.stdout and "(3 left out)" in result.stdout


def test_resume_finishes_a_rescore(project: Path, server: MockModelServer) -> None:
    run = saved_eval(project, server)
    first = v1_cli("rescore", str(run), "scored.toml", *CHANGED, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert first.returncode == 0, first.stderr
    (new_run,) = find_runs(project / "re")
    complete = (new_run / "results.jsonl").read_text().splitlines()
    kept = [line for line in complete if json.loads(line)["example_id"] != 1]  # as if killed before example 1's group
    (new_run / "results.jsonl").write_text("\n".join(kept) + "\n")
    resumed = v1_cli(
        "rescore", str(run), "scored.toml", *CHANGED, "--resume", str(new_run), cwd=project, judge_url=server.url
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(outputs_of(new_run)) == sorted(outputs_of(run))
    assert all(output["reward"] == 1.5 for output in outputs_of(new_run).values())
    other = v1_cli("rescore", str(run), "scored.toml", "-r", "2", "--resume", str(new_run), cwd=project, judge_url=server.url)
    assert other.returncode == 2 and "v1 rescore: error: --resume" in other.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nowhere", "scored.toml"), "nowhere: not a run folder"),
        (("scored.toml", "scored.toml"), "scored.toml: not a run folder"),
        (("RUN",), "name the environment to score with: v1 rescore RUN CONFIG_OR_ENV_ID (the run was made with"),
        (("RUN", "scored.toml", "-r", "0"), "-r/--repeats: must be 1 to 100 (got 0)"),
        (("RUN", "scored.toml", "-r", "1000000"), "-r/--repeats: must be 1 to 100 (got 1000000)"),
        (("RUN", "scored.toml", "-c", "0"), "-c/--max-concurrent: must be at least 1 (got 0)"),
        (("RUN", "scored.toml", "--resume", "nowhere"), "--resume nowhere: no metadata.json there"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project: Path, server: MockModelServer, args: tuple[str, ...], message: str) -> None:
    run = saved_eval(project, server) if "RUN" in args else None
    argv = [str(run) if arg == "RUN" else arg for arg in args]
    message = message.replace("RUN", str(run))
    result = v1_cli("rescore", *argv, "--output-dir", "re", cwd=project, judge_url=server.url)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("v1 rescore: error: ") and message in lines[0], lines
    assert not (project / "re").exists()
