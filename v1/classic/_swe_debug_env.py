"""`SWEDebugEnv`: run a SWE-style task's sandbox without an agent, to check the task itself.

For each row it creates the task's sandbox (`SandboxTaskSet.get_sandbox_config`),
runs the task's setup, one debug step (`none`, `gold_patch`: apply the reference
fix, `command`: a shell command, `script`: a script file), then the task's tests,
and scores 1.0 when they pass. No model is called. What each step printed (its
last `output_tail_chars`) and how it ended go to the state, so a broken task
shows where it breaks: `setup_seconds`, `debug_exit_code`, `debug_output`,
`test_exit_code`, `test_output`, `tests_passed`; a setup that raises is the
rollout's recorded error.

The debug program is also the taskset's `gold`, so `v1 validate` runs it through the same machinery
as any taskset's gold solution (no model behind the endpoint; a task passes when its tests do).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from v1.classic._multiturn_env import MultiTurnEnv
from v1.classic._sandbox_mixin import SandboxMixin
from v1.config import SandboxConfig
from v1.errors import ConfigError, TaskError
from v1.rollout import State, Task, cleanup, reward, teardown, thaw
from v1.sandbox import ExecResult, Sandbox
from v1.types import Messages

DebugStep = Literal["none", "gold_patch", "command", "script"]
DEBUG_STEPS = ("none", "gold_patch", "command", "script")
DEBUG_DIR = ".v1-debug"


class SandboxTaskSet:
    """Tasks that each need a sandbox: what `SWEDebugEnv` (and agents) need from them. Subclass it.

    Every method gets the row's `info`; `setup` and `run_tests` get the live sandbox too.
    """

    def get_dataset(self) -> list[dict[str, Any]]:
        """The rows (each with `question` or `prompt`, and `info`)."""
        raise NotImplementedError(f"{type(self).__name__}.get_dataset")

    def get_sandbox_config(self, info: Mapping[str, Any]) -> SandboxConfig:
        """The sandbox a task runs in (the local backend's defaults unless overridden)."""
        return SandboxConfig()

    async def setup(self, sandbox: Sandbox, info: Mapping[str, Any]) -> None:
        """Prepare the sandbox for the task (copy the repository in, install, ...)."""

    def get_gold_patch(self, info: Mapping[str, Any]) -> str:
        """The reference fix as a unified diff ('' when the task has none)."""
        return str(info.get("gold_patch") or "")

    def get_workdir(self, info: Mapping[str, Any]) -> str | None:
        """Where patches apply and debug steps run (the sandbox's workdir when None)."""
        return None

    async def run_tests(self, sandbox: Sandbox, info: Mapping[str, Any], timeout: float) -> ExecResult:
        """Run the task's tests; passing means exit status 0."""
        raise NotImplementedError(f"{type(self).__name__}.run_tests")


class SWEDebugEnv(SandboxMixin, MultiTurnEnv):
    """No-agent debugger for `SandboxTaskSet` tasks (see the module docs).

    Args:
        taskset: the tasks.
        dataset: rows to run instead of `taskset.get_dataset()`.
        run_setup: run `taskset.setup` first.
        debug_step: `none`, `gold_patch`, `command` (needs `debug_command`) or `script`
            (needs `debug_script` text or a `debug_script_path` on this machine).
        run_tests: run the tests and score them.
        debug_timeout: the debug step's limit in seconds (`test_timeout` when None).
        test_timeout: the tests' limit in seconds.
        cpu_cores, memory_gb, disk_size_gb, labels: override the task's sandbox.
        timeout_seconds: the whole rollout's limit.
        output_tail_chars: how much of each step's output the state keeps.
        **sandbox_kwargs: other `SandboxConfig` fields to override; the rest go to `Environment`.

    Raises:
        ConfigError: an unknown debug step, a missing command or script, a bad limit.
    """

    def __init__(
        self,
        taskset: SandboxTaskSet,
        dataset: Any = None,
        *,
        run_setup: bool = True,
        debug_step: DebugStep = "gold_patch",
        run_tests: bool = True,
        debug_command: str | None = None,
        debug_script: str | None = None,
        debug_script_path: str | None = None,
        debug_timeout: int | None = None,
        test_timeout: int = 900,
        cpu_cores: int | None = None,
        memory_gb: int | None = None,
        disk_size_gb: int | None = None,
        labels: list[str] | None = None,
        timeout_seconds: float = 1800.0,
        output_tail_chars: int = 2000,
        **sandbox_kwargs: Any,
    ) -> None:
        self.taskset_source = taskset
        self.run_setup = run_setup
        self.debug_step = debug_step
        self.run_tests = run_tests
        self.debug_command = debug_command
        self.debug_script = _script_text(debug_step, debug_command, debug_script, debug_script_path)
        self.test_timeout = _positive("test_timeout", test_timeout)
        self.debug_timeout = _positive("debug_timeout", debug_timeout) if debug_timeout is not None else self.test_timeout
        if isinstance(output_tail_chars, bool) or not isinstance(output_tail_chars, int) or output_tail_chars < 0:
            raise ConfigError(f"SWEDebugEnv: output_tail_chars must be a non-negative integer, got {output_tail_chars!r}")
        self.output_tail_chars = output_tail_chars
        fields = set(SandboxConfig.model_fields)
        overrides = {"cpu_cores": cpu_cores, "memory_gb": memory_gb, "disk_size_gb": disk_size_gb, "labels": labels}
        self.sandbox_overrides = {key: value for key, value in overrides.items() if value is not None}
        self.sandbox_overrides |= {key: value for key, value in sandbox_kwargs.items() if key in fields}
        SandboxConfig(**self.sandbox_overrides)  # a bad override fails here, not in every rollout
        environment_kwargs = {key: value for key, value in sandbox_kwargs.items() if key not in fields}
        self.init_sandboxes(SandboxConfig(**self.sandbox_overrides))
        rows = dataset if dataset is not None else taskset.get_dataset()
        super().__init__(dataset=rows, max_turns=1, timeout_seconds=timeout_seconds, **environment_kwargs)
        self.taskset.config.gold = self.rollout_program

    def task_sandbox_config(self, info: Mapping[str, Any]) -> SandboxConfig:
        """The task's sandbox with this environment's overrides applied."""
        base = self.taskset_source.get_sandbox_config(info)
        return SandboxConfig(**{**base.model_dump(exclude_unset=True), **self.sandbox_overrides})

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        return []

    async def rollout_program(self, task: Task, state: State) -> None:
        info = thaw(task.get("info") or {})
        state["completion"] = []
        sandbox = await self.create_sandbox(state, self.task_sandbox_config(info))
        if self.run_setup:
            started = time.monotonic()
            await self.taskset_source.setup(sandbox, info)
            state["setup_seconds"] = round(time.monotonic() - started, 3)
        if self.debug_step != "none":
            result = await self.run_debug_step(sandbox, info)
            state["debug_exit_code"] = result.exit_code
            state["debug_timed_out"] = result.timed_out
            state["debug_output"] = self.tail(result)
        if self.run_tests:
            result = await self.taskset_source.run_tests(sandbox, info, self.test_timeout)
            state["test_exit_code"] = result.exit_code
            state["test_timed_out"] = result.timed_out
            state["test_output"] = self.tail(result)
            state["tests_passed"] = result.ok

    async def run_debug_step(self, sandbox: Sandbox, info: Mapping[str, Any]) -> ExecResult:
        """Run the configured debug step in the task's working directory.

        Raises:
            TaskError: `gold_patch` for a task without one.
        """
        cwd = self.taskset_source.get_workdir(info)
        if self.debug_step == "command":
            assert self.debug_command is not None
            return await sandbox.exec(["sh", "-c", self.debug_command], cwd=cwd, timeout=self.debug_timeout)
        if self.debug_step == "script":
            assert self.debug_script is not None
            await sandbox.write_file(f"{DEBUG_DIR}/debug_script", self.debug_script.encode())
            path = f"{sandbox.workdir}/{DEBUG_DIR}/debug_script"
            argv = ["sh", "-c", 'chmod +x "$1" && exec "$1"', "sh", path]
            if not self.debug_script.startswith("#!"):
                argv = ["sh", path]
            return await sandbox.exec(argv, cwd=cwd, timeout=self.debug_timeout)
        patch = self.taskset_source.get_gold_patch(info)
        if not patch.strip():
            raise TaskError(f"debug_step='gold_patch': task {info.get('task', '')!r} has no gold patch")
        await sandbox.write_file(f"{DEBUG_DIR}/gold.patch", patch.encode())
        apply = ["git", "apply", "--whitespace=nowarn", f"{sandbox.workdir}/{DEBUG_DIR}/gold.patch"]
        return await sandbox.exec(apply, cwd=cwd, timeout=self.debug_timeout)

    def tail(self, result: ExecResult) -> str:
        """The last `output_tail_chars` of a step's stdout and stderr."""
        text = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
        return text[-self.output_tail_chars :] if self.output_tail_chars else ""

    @reward
    async def tests_passed(self, state: State) -> float:
        """1.0 when the task's tests passed after the debug step."""
        return float(state.get("tests_passed") is True)

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        """Delete the rollout's sandbox (after scoring)."""
        await self.delete_sandbox(state)

    @teardown
    async def teardown_sandboxes(self) -> None:
        """Delete every sandbox still held."""
        await self.delete_all_sandboxes()


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 7 * 24 * 3600:
        raise ConfigError(f"SWEDebugEnv: {name} must be a number of seconds in (0, 604800], got {value!r}")
    return float(value)


def _script_text(step: str, command: str | None, script: str | None, script_path: str | None) -> str | None:
    if step not in DEBUG_STEPS:
        raise ConfigError(f"SWEDebugEnv: debug_step must be one of {DEBUG_STEPS}, got {step!r}")
    if step == "command" and not (isinstance(command, str) and command.strip()):
        raise ConfigError("SWEDebugEnv: debug_step='command' needs debug_command (a shell command)")
    if step != "script":
        return None
    if (script is None) == (script_path is None):
        raise ConfigError("SWEDebugEnv: debug_step='script' needs exactly one of debug_script or debug_script_path")
    if script_path is not None:
        path = Path(script_path)
        if not path.is_file():
            raise ConfigError(f"SWEDebugEnv: debug_script_path {script_path!r} is not a file")
        return path.read_text(encoding="utf-8")
    return script


__all__ = ["DEBUG_STEPS", "SWEDebugEnv", "SandboxTaskSet"]
