"""`SandboxEnv` (a `bash` tool in a sandbox per rollout) and `PythonEnv` (a persistent Python REPL in it).

The seed's sandbox fields map onto a `SandboxConfig` (`v1.classic`): the
local bubblewrap backend by default, `backend="prime"` for a container image.
`setup_state` creates the rollout's sandbox and puts its id in
`state["sandbox_id"]`, which `update_tool_args` passes to the tools (the model
never sees it); a cleanup deletes it after scoring, so reward functions can still
look inside; a teardown deletes what a run left behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from v1.classic._sandbox_fields import SEED_IMAGE, SEED_START_COMMAND, clip, seed_sandbox_config
from v1.classic._sandbox_mixin import SandboxMixin
from v1.classic._tool_env import StatefulToolEnv
from v1.errors import ConfigError
from v1.rollout import State, cleanup, teardown
from v1.sandbox import PythonRepl
from v1.types import Messages


class SandboxEnv(SandboxMixin, StatefulToolEnv):
    """Tools that run in a sandbox of their own per rollout; the model gets `bash`.

    Args:
        sandbox_name: a label on every sandbox (`name:<sandbox_name>`, shown by `v1 sandbox list`).
        docker_image: the image (prime backend); on the local backend only the default, meaning the host's system.
        start_command: the image's keep-alive command (prime backend; the local backend keeps nothing running).
        cpu_cores, memory_gb, disk_size_gb, gpu_count: the sandbox's resources (memory and disk are enforced locally).
        timeout_minutes: the most a sandbox lives; it is deleted then even if its rollout runs on.
        timeout_per_command_seconds: each command's limit; a command past it is killed and the tool says so.
        environment_vars: set for every command.
        team_id, advanced_configs: passed to prime sandboxes.
        labels: more labels on every sandbox.
        backend: the sandbox backend (`local` or `prime`, or one registered with `register_backend`).
        **kwargs: the `StatefulToolEnv` arguments (dataset, rubric, max_turns, tools, ...).

    Raises:
        ConfigError: a field out of range, or one the backend can't honour (an image on the local backend).
    """

    def __init__(
        self,
        sandbox_name: str = "sandbox-env",
        docker_image: str = SEED_IMAGE,
        start_command: str = SEED_START_COMMAND,
        cpu_cores: int = 1,
        memory_gb: int = 2,
        disk_size_gb: int = 5,
        gpu_count: int = 0,
        timeout_minutes: int = 60,
        timeout_per_command_seconds: int = 30,
        environment_vars: Mapping[str, str] | None = None,
        team_id: str | None = None,
        advanced_configs: Mapping[str, Any] | None = None,
        labels: Sequence[str] | None = None,
        backend: str = "local",
        **kwargs: Any,
    ) -> None:
        config = seed_sandbox_config(
            backend=backend,
            sandbox_name=sandbox_name,
            docker_image=docker_image,
            start_command=start_command,
            cpu_cores=cpu_cores,
            memory_gb=memory_gb,
            disk_size_gb=disk_size_gb,
            gpu_count=gpu_count,
            timeout_minutes=timeout_minutes,
            timeout_per_command_seconds=timeout_per_command_seconds,
            environment_vars=environment_vars,
            team_id=team_id,
            advanced_configs=advanced_configs,
            labels=labels,
        )
        self.init_sandboxes(config)
        self.sandbox_name = sandbox_name
        self.docker_image = docker_image
        self.start_command = start_command
        super().__init__(**kwargs)
        self.add_tool(self.bash, args_to_skip=["sandbox_id"])

    async def setup_state(self, state: State) -> State:
        """Create the rollout's sandbox (its id in `state["sandbox_id"]`)."""
        state = await super().setup_state(state)
        await self.create_sandbox(state)
        return state

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        """The tool's arguments with this rollout's `sandbox_id`, whatever the model sent: no rollout reaches another's."""
        arguments = super().update_tool_args(tool_name, tool_args, messages, state, **kwargs)
        if "sandbox_id" in self.skipped_args.get(tool_name, []):
            arguments = {**arguments, "sandbox_id": state["sandbox_id"]}
        return arguments

    async def bash(self, command: str, sandbox_id: str, working_dir: str | None = None) -> str:
        """Run a shell command in the sandbox and return its output (stdout, then stderr, then how it ended).

        Args:
            command: the command line, run by bash.
            working_dir: the directory to run it in (the sandbox's workspace by default).
        """
        return await self.run_command(sandbox_id, command, working_dir)

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        """Delete the rollout's sandbox (after scoring)."""
        await self.delete_sandbox(state)

    @teardown
    async def teardown_sandboxes(self) -> None:
        """Delete every sandbox still held."""
        await self.delete_all_sandboxes()


class PythonEnv(SandboxEnv):
    """A persistent Python REPL per rollout: variables, imports and functions stay between `python` calls.

    The interpreter runs in the rollout's sandbox and talks to the host over the
    backend's control channel, which only the local backend has. A cell past
    `timeout_per_command_seconds` stops the interpreter; the next call starts a
    fresh one and says that earlier variables are gone.

    Args:
        **kwargs: the `SandboxEnv` arguments.

    Raises:
        ConfigError: a backend other than `local`.
    """

    def __init__(self, **kwargs: Any) -> None:
        backend = kwargs.get("backend", "local")
        if backend != "local":
            raise ConfigError(
                f"PythonEnv: backend={backend!r} has no control channel for a persistent interpreter; use backend='local'"
            )
        super().__init__(**kwargs)
        self.remove_tool("bash")
        self.add_tool(self.python, args_to_skip=["sandbox_id"])
        self._repls: dict[str, PythonRepl] = {}

    async def python(self, code: str, sandbox_id: str) -> str:
        """Run Python code in a persistent interpreter; what it printed and the value of its last expression.

        Args:
            code: Python statements; variables, imports and functions persist between calls.
        """
        repl = self._repls.get(sandbox_id)
        if repl is None:
            repl = self._repls[sandbox_id] = PythonRepl(self.get_sandbox(sandbox_id))
        return clip(await repl.run(code, self.timeout_per_command_seconds)) or "(no output)"

    async def delete_sandbox(self, state_or_id: Any) -> None:
        sandbox_id = state_or_id if isinstance(state_or_id, str) else state_or_id.get("sandbox_id")
        repl = self._repls.pop(sandbox_id, None) if isinstance(sandbox_id, str) else None
        if repl is not None:
            await repl.close()
        await super().delete_sandbox(state_or_id)


__all__ = ["PythonEnv", "SandboxEnv"]
