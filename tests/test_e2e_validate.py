"""End to end: `v1 validate` as a real process; the policy's model server (a mock) must never be called."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer
from v1.view import RolloutIndex, find_runs

ROOT = Path(__file__).resolve().parent.parent

CHECKS = """
from pathlib import Path

import v1 as vf

HERE = Path(__file__).parent


def rows():
    return [
        {"question": "abc", "answer": "cba"},
        {"question": "boom", "answer": "moob"},
        {"question": "xyz", "answer": "zyX"},  # a wrong answer key
    ]


def prepare(task):
    with (HERE / "setups.log").open("a") as log:
        log.write(f"{task['example_id']}\\n")
    if task["question"] == "boom" and (HERE / "broken").exists():
        raise RuntimeError("the fixture of 'boom' is missing")


def reversed_question(completion, task):
    text = completion[-1]["content"] if completion else ""
    return float(text == task["question"][::-1])


gold = vf.answer_gold()


async def asks_the_model(task, state):
    client = state.get_client()
    reply = await client.chat.completions.create(model=state.get_model(), messages=[{"role": "user", "content": "hi"}])
    return {"completion": [{"role": "assistant", "content": reply.choices[0].message.content}]}
"""

CONFIG = """
[env.taskset]
taskset_id = "checks"
source = "checks:rows"
gold = "checks:gold"

[[env.taskset.setups]]
fn = "checks:prepare"

[[env.taskset.rewards]]
fn = "checks:reversed_question"
weight = 1.0

[env.harness]
model = "policy"

[env.harness.client]
api_base_url = "{url}"
max_retries = 0
"""


@pytest.fixture
def checks(tmp_path: Path, mock: MockModelServer) -> Path:
    """A TOML environment whose harness names the mock as its model: one broken task, one wrong answer key."""
    (tmp_path / "checks.py").write_text(textwrap.dedent(CHECKS))
    (tmp_path / "checks.toml").write_text(CONFIG.format(url=mock.url))
    (tmp_path / "broken").write_text("")
    return tmp_path / "checks.toml"


def validate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["V1_SANDBOX_ROOT"] = str(cwd / "sandboxes")
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", "validate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def only_run(output_dir: Path) -> Path:
    runs = find_runs(output_dir)
    assert len(runs) == 1, runs
    return runs[0]


def saved(run: Path) -> dict[Any, dict[str, Any]]:
    lines = (run / "results.jsonl").read_text().splitlines()
    return {output["example_id"]: output for output in map(json.loads, lines)}


def fail_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("FAIL")]


def test_broken_task_and_wrong_answer_key_fail_naming_their_stage(checks: Path, mock: MockModelServer) -> None:
    result = validate(str(checks), "--output-dir", "out", cwd=checks.parent)
    assert result.returncode == 1, result.stderr
    assert fail_lines(result) == [
        "FAIL example 1 [setup]: setup:prepare: RuntimeError: the fixture of 'boom' is missing",
        "FAIL example 2 [scoring]: reward 0.0 is below the threshold 1 (reversed_question=0)",
    ]
    run = only_run(checks.parent / "out")
    assert f"v1 validate: 2 of 3 tasks failed (threshold 1); results: {run.relative_to(checks.parent)}" in result.stdout
    outputs = saved(run)
    assert outputs[0]["validation"] == {"passed": True, "stage": None, "reason": None}
    assert outputs[0]["completion"] == [{"role": "assistant", "content": "cba"}] and outputs[0]["reward"] == 1.0
    assert [outputs[i]["validation"]["stage"] for i in (1, 2)] == ["setup", "scoring"]
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["validation"] == {"checked": 3, "failed": 2, "threshold": 1.0}
    assert metadata["model"] == "gold" and metadata["num_rollouts"] == 3
    index = RolloutIndex(run / "results.jsonl")  # what `v1 view` reads
    index.refresh()
    assert len(index.rows) == 3
    assert mock.requests == []


def test_a_gold_that_calls_the_model_fails_loudly_and_reaches_no_model(checks: Path, mock: MockModelServer) -> None:
    (checks.parent / "broken").unlink()
    result = validate(str(checks), "--taskset.gold", "checks:asks_the_model", "--output-dir", "out", cwd=checks.parent)
    assert result.returncode == 1, result.stderr
    lines = fail_lines(result)
    assert len(lines) == 3
    assert all("[gold]" in line and "a gold run has no model" in line for line in lines), lines
    assert mock.requests == []


def test_only_setup_checks_the_setups_alone(checks: Path, mock: MockModelServer) -> None:
    result = validate(str(checks), "--only-setup", "--taskset.gold", "null", "--output-dir", "out", cwd=checks.parent)
    assert result.returncode == 1, result.stderr
    assert fail_lines(result) == ["FAIL example 1 [setup]: setup:prepare: RuntimeError: the fixture of 'boom' is missing"]
    assert "v1 validate: 1 of 3 setups failed;" in result.stdout
    outputs = saved(only_run(checks.parent / "out"))
    assert outputs[2]["completion"] == [] and outputs[2]["reward"] is None  # no gold ran, nothing was scored
    (checks.parent / "broken").unlink()
    fixed = validate(str(checks), "--only-setup", "-n", "2", "--output-dir", "out2", cwd=checks.parent)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "v1 validate: all 2 setups passed;" in fixed.stdout
    assert mock.requests == []


def test_resume_keeps_what_passed_and_runs_the_rest_again(checks: Path) -> None:
    first = validate(str(checks), "--output-dir", "out", cwd=checks.parent)
    assert first.returncode == 1
    run = only_run(checks.parent / "out")
    log = checks.parent / "setups.log"
    assert sorted(log.read_text().split()) == ["0", "1", "2"]
    log.unlink()
    (checks.parent / "broken").unlink()
    resumed = validate(str(checks), "--resume", str(run), cwd=checks.parent)
    assert resumed.returncode == 1, resumed.stderr
    assert sorted(log.read_text().split()) == ["1", "2"]  # example 0 passed: kept, not run again
    assert fail_lines(resumed) == ["FAIL example 2 [scoring]: reward 0.0 is below the threshold 1 (reversed_question=0)"]
    assert set(saved(run)) == {0, 1, 2} and saved(run)[1]["validation"]["passed"] is True
    again = validate(str(checks), "--only-setup", "--resume", str(run), cwd=checks.parent)
    assert again.returncode == 2
    assert "differs in only_setup (saved False, now True)" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("wordle",), "wordle: the taskset declares no gold solution"),
        (("reverse_text", "-n", "0"), "-n/--num-examples: must be at least 1, or -1 for all (got 0)"),
        (("reverse_text", "-c", "-3"), "-c/--max-concurrent: must be at least 1 (got -3)"),
        (("reverse_text", "--resume", "nowhere"), "--resume nowhere: no metadata.json there"),
        (("reverse_text", "--taskset.gold", "no_such_module:gold"), "no_such_module"),
        (("no_such_env_anywhere",), "no_such_env_anywhere"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = validate(*args, "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("v1 validate: error: ") and message in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "env", ["reverse_text", "first_letter", "gsm8k", "competition_math", "alphabet_sort", "math_python", "swe", "harbor"]
)
def test_bundled_tasksets_gold_solutions_pass(tmp_path: Path, env: str) -> None:
    result = validate(env, "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = saved(only_run(tmp_path / "out"))
    assert outputs and all(output["reward"] == 1.0 and output["error"] is None for output in outputs.values())
    assert f"v1 validate: all {len(outputs)} tasks passed (threshold 1)" in result.stdout


def test_classic_swe_debug_env_runs_through_validate(tmp_path: Path) -> None:
    (tmp_path / "swe_debug.py").write_text(
        "import v1 as vf\nfrom tasksets.swe import SWETaskSet\n\n\n"
        "def load_environment() -> vf.Env:\n    return vf.SWEDebugEnv(SWETaskSet())\n"
    )
    result = validate("swe_debug", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = saved(only_run(tmp_path / "out"))
    assert [output["metrics"] for output in outputs.values()] == [{"tests_passed": 1.0}] * 2
