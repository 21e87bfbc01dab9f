"""SWEDebugEnv on the bundled swe tasks: real bwrap sandboxes, setup, each debug step, the hidden tests, no model."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tasksets.swe import TASKS_DIR, SWETaskSet
from tests.tools.patience import growing_limits
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def run(env: vf.SWEDebugEnv, mock: MockModelServer) -> list[dict[str, Any]]:
    columns = ["tests_passed", "test_exit_code", "test_output", "debug_exit_code", "debug_output", "sandbox_id"]
    outputs = await env.generate(
        env.get_dataset(), vf.ClientConfig(api_base_url=mock.url, max_retries=0), "test-model", state_columns=columns
    )
    assert mock.requests == []  # a debugger, not an agent: the model is never called
    assert list_sandboxes() == []
    return [dict(output) for output in outputs["outputs"]]


async def test_the_gold_patch_passes_every_task(mock: MockModelServer) -> None:
    outputs = await run(vf.SWEDebugEnv(SWETaskSet()), mock)
    assert len(outputs) == len(list(TASKS_DIR.iterdir())) >= 2
    for output in outputs:
        assert output["error"] is None, output["error"]
        assert (output["debug_exit_code"], output["test_exit_code"], output["tests_passed"]) == (0, 0, True)
        assert output["reward"] == 1.0


async def test_without_a_fix_the_tests_fail(mock: MockModelServer) -> None:
    outputs = await run(vf.SWEDebugEnv(SWETaskSet(), debug_step="none"), mock)
    assert [(o["tests_passed"], o["reward"]) for o in outputs] == [(False, 0.0)] * len(outputs)
    assert all(o["test_exit_code"] != 0 and o["test_output"] for o in outputs)
    assert all("debug_exit_code" not in o or o["debug_exit_code"] is None for o in outputs)


async def test_a_command_and_a_script_run_in_the_task_sandbox(mock: MockModelServer, tmp_path: Path) -> None:
    env = vf.SWEDebugEnv(SWETaskSet(), debug_step="command", debug_command="git log --oneline | wc -l; ls", run_tests=False)
    [first, *_] = await run(env, mock)
    assert first["debug_exit_code"] == 0 and first["debug_output"].startswith("1\n")
    assert first.get("tests_passed") is None and first["reward"] == 0.0

    script = tmp_path / "debug.py"
    script.write_text("#!/usr/bin/env python3\nimport os\nprint('script in', os.getcwd())\n")
    env = vf.SWEDebugEnv(SWETaskSet(), debug_step="script", debug_script_path=str(script), run_tests=False)
    [first, *_] = await run(env, mock)
    assert (first["debug_exit_code"], first["debug_output"]) == (0, "script in /workspace\n")

    env = vf.SWEDebugEnv(SWETaskSet(), debug_step="script", debug_script="echo plain; exit 4", run_tests=False)
    [first, *_] = await run(env, mock)
    assert (first["debug_exit_code"], first["debug_output"]) == (4, "plain\n")


async def test_a_debug_step_past_debug_timeout_is_killed(mock: MockModelServer) -> None:
    for timeout in growing_limits():  # the limit counts the sandbox's start: on a loaded machine, echo may not run in 1 s
        command = "echo waiting; sleep 3600"
        env = vf.SWEDebugEnv(SWETaskSet(), debug_step="command", debug_command=command, debug_timeout=int(timeout))
        outputs = await run(env, mock)
        if all(o["debug_output"] for o in outputs):
            break
    assert all(o["debug_output"] == "waiting\n" and o["tests_passed"] is False for o in outputs)


async def test_a_broken_task_is_a_recorded_error_and_its_sandbox_is_deleted(mock: MockModelServer, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS_DIR, tasks)
    first = sorted(tasks.iterdir())[0]
    shutil.rmtree(first / "repo")
    (first / "repo").mkdir()  # nothing to commit: the setup's git commit fails
    outputs = await run(vf.SWEDebugEnv(SWETaskSet(tasks)), mock)
    broken, *others = outputs
    assert broken["error"]["type"] == "SandboxError" and "git" in broken["error"]["message"]
    assert broken["reward"] == 0.0
    assert all(o["error"] is None and o["reward"] == 1.0 for o in others)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"debug_step": "patch"}, "debug_step must be one of"),
        ({"debug_step": "command"}, "debug_step='command' needs debug_command"),
        ({"debug_step": "script"}, "needs exactly one of debug_script or debug_script_path"),
        ({"debug_step": "script", "debug_script_path": "/no/such/file"}, "is not a file"),
        ({"test_timeout": 0}, "test_timeout must be a number of seconds"),
        ({"debug_timeout": -1}, "debug_timeout must be a number of seconds"),
        ({"test_timeout": 10**12}, "test_timeout must be a number of seconds"),
        ({"output_tail_chars": -1}, "output_tail_chars must be a non-negative integer"),
        ({"memory_gb": 0}, "field 'memory_gb': Input should be greater than 0"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(vf.ConfigError) as caught:
        vf.SWEDebugEnv(SWETaskSet(), **kwargs)
    assert message in str(caught.value)


def test_an_unknown_keyword_is_kept_as_an_attribute_as_the_seed_says() -> None:
    assert vf.SWEDebugEnv(SWETaskSet(), no_such_setting=1).no_such_setting == 1
