"""swe: fix a bug in a small git repository; hidden tests decide (SWE-bench style, tiny and local).

A task is a folder::

    problem.md     the issue the agent is asked to fix (the prompt)
    repo/          the repository's files (committed as a fresh git repo in the sandbox)
    tests/         test files copied in after the agent, then run
    task.toml      test_command = "python3 -m unittest -q test_x"
    gold.patch     the reference fix (a unified diff against repo/)

Two tiny tasks ship in `tasksets/data/swe/`. A setup handler commits `repo/` in the
program's sandbox; the program (by default a one-shot agent that asks the model for a
unified diff and `git apply`s it) edits it; the reward `tests_pass` adds `tests/` and
runs `test_command`: 1.0 when it exits 0. `GOLD_PROGRAM` applies `gold.patch` instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import v1 as vf
from v1.sandbox import ExecResult, Sandbox, read_host_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TASKS_DIR = Path(__file__).parent / "data" / "swe"
MAX_TASK_FILE_BYTES = 10 * 1024 * 1024
GIT = ["git", "-c", "user.name=v1", "-c", "user.email=v1@localhost"]

AGENT_SCRIPT = """
import os, re, subprocess
import openai

files = subprocess.run(["git", "ls-files"], capture_output=True, text=True).stdout.split()
listing = "\\n\\n".join(f"--- {name}\\n{open(name).read()}" for name in files)
messages = [
    {"role": "system", "content": "Fix the issue in the repository. Reply with a unified diff (git format) in a "
     "```diff code block."},
    {"role": "user", "content": open("problem.md").read() + "\\n\\nRepository files:\\n\\n" + listing},
]
reply = openai.OpenAI().chat.completions.create(model=os.environ["V1_MODEL"], messages=messages)
text = reply.choices[0].message.content or ""
blocks = re.findall(r"```(?:diff|patch)?\\n(.*?)```", text, re.DOTALL)
open("/tmp/fix.patch", "w").write(blocks[-1] if blocks else text)
applied = subprocess.run(["git", "apply", "/tmp/fix.patch"], capture_output=True, text=True)
print("applied" if applied.returncode == 0 else "patch did not apply: " + applied.stderr[-1000:])
"""

AGENT_PROGRAM: dict[str, Any] = {
    "command": ["python3", "agent.py"],
    "files": {"agent.py": AGENT_SCRIPT},
    "bindings": {"files.problem.md": "task.question"},
}
GOLD_PROGRAM: dict[str, Any] = {
    "command": ["git", "apply", "gold.patch"],
    "bindings": {"files.gold.patch": "task.info.gold_patch"},
}
"""Applies the reference fix: it must score 1.0 on every task."""
SANDBOX: dict[str, Any] = {"memory_gb": 1, "disk_size_gb": 1, "timeout_minutes": 10}


def load_task(folder: Path) -> dict[str, Any]:
    """One row from a task folder: `question` (problem.md) and `info` (name, folder, test command, gold patch).

    Raises:
        vf.TaskError: a required file is missing or task.toml has no test_command.
    """
    for required in ("problem.md", "task.toml", "repo", "tests"):
        if not os.path.lexists(folder / required):
            raise vf.TaskError(f"swe task {folder}: missing {required}")
    try:
        meta = tomllib.loads(read_task_file(folder, "task.toml"))
    except tomllib.TOMLDecodeError as exc:
        raise vf.TaskError(f"swe task {folder}: invalid task.toml: {exc}") from None
    if not isinstance(meta.get("test_command"), str):
        raise vf.TaskError(f"swe task {folder}: task.toml needs test_command (a shell command)")
    return {
        "question": read_task_file(folder, "problem.md"),
        "info": {
            "task": folder.name,
            "task_dir": str(folder.absolute()),
            "test_command": meta["test_command"],
            "gold_patch": read_task_file(folder, "gold.patch", optional=True),
        },
    }


def read_task_file(folder: Path, name: str, optional: bool = False) -> str:
    """A text file of a task folder, read beneath the folder (a downloaded task folder is outside data:
    a symlink there, the folder itself included, is refused, never followed).

    Raises:
        vf.TaskError: the file is missing (unless `optional`: then ""), a symlink, or over `MAX_TASK_FILE_BYTES`.
    """
    try:
        return read_host_file(name, MAX_TASK_FILE_BYTES, beneath=folder).decode("utf-8")
    except FileNotFoundError:
        if optional:
            return ""
        raise vf.TaskError(f"task {folder}: missing {name}") from None
    except (vf.SandboxError, OSError, UnicodeDecodeError) as exc:
        raise vf.TaskError(f"task {folder}: {name}: {exc}") from None


def load_rows(tasks_dir: str | Path = TASKS_DIR) -> list[dict[str, Any]]:
    """A row per task folder under `tasks_dir`, in name order."""
    return [load_task(folder) for folder in sorted(Path(tasks_dir).iterdir()) if folder.is_dir()]


async def commit_repo(sandbox: Sandbox, info: dict[str, Any]) -> None:
    """The task's `repo/` as a fresh git repository (one commit) in `sandbox`'s workspace."""
    await sandbox.upload(Path(info["task_dir"]) / "repo", ".")
    for command in (["git", "init", "-q"], ["git", "add", "-A"], [*GIT, "commit", "-q", "-m", "base"]):
        result = await sandbox.exec(command, timeout=60)
        if result.exit_code != 0:
            raise vf.SandboxError(f"swe task {info['task']}: {' '.join(command)} failed: {result.stderr[-500:]}")


async def run_task_tests(sandbox: Sandbox, info: dict[str, Any], timeout: float = 120) -> ExecResult:
    """Copy the task's hidden `tests/` in and run its `test_command`."""
    await sandbox.upload(Path(info["task_dir"]) / "tests", ".")
    return await sandbox.exec(["sh", "-c", info["test_command"]], timeout=timeout)


async def make_repo(state: vf.State, info: dict[str, Any]) -> None:
    """Setup: the task's `repo/` as a fresh git repository (one commit) in the program's sandbox."""
    await commit_repo(await state.get_sandbox(), info)


async def tests_pass(state: vf.State, info: dict[str, Any]) -> float:
    """1.0 when the task's tests pass after the program; the diff and test output go to the state."""
    sandbox = await state.get_sandbox()
    diff = await sandbox.exec(["git", "diff"], timeout=60)
    state["patch"] = diff.stdout[-10000:]
    result = await run_task_tests(sandbox, info)
    state["test_output"] = (result.stdout + result.stderr)[-2000:]
    return float(result.exit_code == 0)


class SWETaskSet(vf.SandboxTaskSet):
    """These task folders as a `vf.SandboxTaskSet`, e.g. for `vf.SWEDebugEnv(SWETaskSet())`."""

    def __init__(self, tasks_dir: str | Path = TASKS_DIR) -> None:
        self.tasks_dir = Path(tasks_dir)

    def get_dataset(self) -> list[dict[str, Any]]:
        return load_rows(self.tasks_dir)

    def get_sandbox_config(self, info: Mapping[str, Any]) -> vf.SandboxConfig:
        return vf.SandboxConfig(**SANDBOX)

    async def setup(self, sandbox: Sandbox, info: Mapping[str, Any]) -> None:
        await commit_repo(sandbox, dict(info))

    async def run_tests(self, sandbox: Sandbox, info: Mapping[str, Any], timeout: float) -> ExecResult:
        return await run_task_tests(sandbox, dict(info), timeout)


DEFAULTS: dict[str, Any] = {
    "taskset_id": "swe",
    "source": "tasksets.swe:load_rows",
    "eval_source": "tasksets.swe:load_rows",
    "setups": [{"fn": "tasksets.swe:make_repo"}],
    "rewards": [{"fn": "tasksets.swe:tests_pass", "weight": 1.0}],
    "gold": GOLD_PROGRAM,
}
HARNESS_DEFAULTS: dict[str, Any] = {"program": AGENT_PROGRAM, "sandbox": SANDBOX, "max_turns": 4, "timeout_seconds": 300}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The swe taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


def load_harness(config: vf.HarnessConfig | None = None) -> vf.Harness:
    """The one-shot diff agent in a sandbox; fields set in `config` (``[env.harness]``) override it."""
    return vf.Harness(config=vf.HarnessConfig.with_defaults(HARNESS_DEFAULTS, config))


__all__ = [
    "AGENT_PROGRAM",
    "DEFAULTS",
    "GOLD_PROGRAM",
    "HARNESS_DEFAULTS",
    "SANDBOX",
    "SWETaskSet",
    "TASKS_DIR",
    "load_harness",
    "load_rows",
    "load_task",
    "load_taskset",
    "make_repo",
    "read_task_file",
    "commit_repo",
    "run_task_tests",
    "tests_pass",
]
