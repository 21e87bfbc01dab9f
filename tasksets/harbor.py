"""harbor: terminal tasks in the Harbor / terminal-bench folder layout, scored by their own tests.

A task is a folder::

    instruction.md       what the agent is asked to do (the prompt)
    task.toml            metadata; [verifier] timeout_sec, [agent] timeout_sec
    tests/test.sh        exits 0 when the task is done (run from the working directory)
    solution/solve.sh    a reference solution (the oracle runs it)

Rows come from the task folders under `tasks_dir` (two tiny ones ship in
`tasksets/data/harbor/`). The program runs in a sandbox (bubblewrap locally); after it,
the reward `tests_pass` copies `tests/` into the same sandbox and runs `test.sh`:
1.0 when it exits 0. The default agent is a one-shot command agent (it asks the model
for a bash script and runs it); `ORACLE_PROGRAM` runs `solve.sh` instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import v1 as vf
from tasksets.swe import read_task_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TASKS_DIR = Path(__file__).parent / "data" / "harbor"
TESTS_DIR = ".harbor_tests"
"""Where the tests go in the sandbox's working directory (after the agent ran, so it never sees them)."""

AGENT_SCRIPT = """
import os, re, subprocess
import openai

instruction = open("instruction.md").read()
messages = [
    {"role": "system", "content": "You are in a Linux shell, in the task's working directory. Reply with one bash "
     "script in a ```bash code block that does the task."},
    {"role": "user", "content": instruction},
]
reply = openai.OpenAI().chat.completions.create(model=os.environ["V1_MODEL"], messages=messages)
text = reply.choices[0].message.content or ""
blocks = re.findall(r"```(?:bash|sh)?\\n(.*?)```", text, re.DOTALL)
script = blocks[-1] if blocks else text
done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
print(done.stdout[-2000:], done.stderr[-2000:])
"""

AGENT_PROGRAM: dict[str, Any] = {
    "command": ["python3", "agent.py"],
    "files": {"agent.py": AGENT_SCRIPT},
    "bindings": {"files.instruction.md": "task.question"},
}
ORACLE_PROGRAM: dict[str, Any] = {"command": ["bash", "solve.sh"], "bindings": {"files.solve.sh": "task.info.solution"}}
"""The oracle: runs the task's `solution/solve.sh`; it must score 1.0 on every task."""
SANDBOX: dict[str, Any] = {"memory_gb": 1, "disk_size_gb": 1, "timeout_minutes": 10}


def load_task(folder: Path) -> dict[str, Any]:
    """One row from a task folder: `question` (instruction.md) and `info` (name, folder, solution, verifier timeout).

    Raises:
        vf.TaskError: a required file is missing or task.toml is invalid.
    """
    for required in ("instruction.md", "task.toml", "tests/test.sh"):
        if not os.path.lexists(folder / required):
            raise vf.TaskError(f"harbor task {folder}: missing {required}")
    try:
        meta = tomllib.loads(read_task_file(folder, "task.toml"))
    except tomllib.TOMLDecodeError as exc:
        raise vf.TaskError(f"harbor task {folder}: invalid task.toml: {exc}") from None
    return {
        "question": read_task_file(folder, "instruction.md"),
        "info": {
            "task": folder.name,
            "task_dir": str(folder.absolute()),
            "solution": read_task_file(folder, "solution/solve.sh", optional=True),
            "verifier_timeout": float(meta.get("verifier", {}).get("timeout_sec", 60.0)),
            "metadata": meta.get("metadata", {}),
        },
    }


def load_rows(tasks_dir: str | Path = TASKS_DIR) -> list[dict[str, Any]]:
    """A row per task folder under `tasks_dir`, in name order."""
    return [load_task(folder) for folder in sorted(Path(tasks_dir).iterdir()) if folder.is_dir()]


async def tests_pass(state: vf.State, info: dict[str, Any]) -> float:
    """1.0 when the task's tests/test.sh exits 0 in the program's sandbox, after the program; its output goes to `state["test_output"]`."""
    sandbox = await state.get_sandbox()
    await sandbox.upload(Path(info["task_dir"]) / "tests", TESTS_DIR)
    result = await sandbox.exec(["bash", f"{TESTS_DIR}/test.sh"], timeout=info["verifier_timeout"])
    state["test_output"] = (result.stdout + result.stderr)[-2000:]
    return float(result.exit_code == 0)


DEFAULTS: dict[str, Any] = {
    "taskset_id": "harbor",
    "source": "tasksets.harbor:load_rows",
    "eval_source": "tasksets.harbor:load_rows",
    "rewards": [{"fn": "tasksets.harbor:tests_pass", "weight": 1.0}],
    "gold": ORACLE_PROGRAM,
}
HARNESS_DEFAULTS: dict[str, Any] = {"program": AGENT_PROGRAM, "sandbox": SANDBOX, "max_turns": 4, "timeout_seconds": 300}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The harbor taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


def load_harness(config: vf.HarnessConfig | None = None) -> vf.Harness:
    """The one-shot bash agent in a sandbox; fields set in `config` (``[env.harness]``) override it."""
    return vf.Harness(config=vf.HarnessConfig.with_defaults(HARNESS_DEFAULTS, config))


__all__ = [
    "AGENT_PROGRAM",
    "DEFAULTS",
    "HARNESS_DEFAULTS",
    "ORACLE_PROGRAM",
    "SANDBOX",
    "TASKS_DIR",
    "load_harness",
    "load_rows",
    "load_task",
    "load_taskset",
    "tests_pass",
]
