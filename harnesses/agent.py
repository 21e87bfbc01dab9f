"""What every CLI-agent harness shares: install, sandbox, prompt files, the run script, lenient exit.

An `AgentHarness` is a `v1.Harness` whose program is a command: a POSIX shell
script (`AgentHarness.script`) run in the rollout's sandbox with the rollout's
endpoint in its environment (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, the
rollout's own key as `OPENAI_API_KEY`/`ANTHROPIC_API_KEY`, `V1_MODEL`) plus:

- `V1_PROMPT_FILE`: the task's prompt as text (user turns), `V1_SYSTEM_FILE`: its system prompt;
- `PATH` starting with the agent's executable directory.

The agent's package (npm: `harnesses.npm`, PyPI: `harnesses.pypi`) is installed
once per machine and shown read-only to local sandboxes; other backends install
it into each sandbox through `SandboxConfig.packages` (use `scope = "group"` or an
image that has it). An agent that exits non-zero after it answered (its last model call
returned an answer without tool calls) is not an error: its trajectory is scored,
and the exit status stays in `state["program_result"]`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

import v1 as vf
from harnesses.npm import MOUNT_POINT, NpmPackage, cache_root
from harnesses.packages import AgentInstall, AgentPackage
from v1.config import ArtifactConfig, HarnessConfig, ProgramConfig, SandboxConfig
from v1.errors import ProgramError
from v1.programs import CommandProgram, Program

if TYPE_CHECKING:
    from v1.rollout import RolloutContext

AGENT_DIR = ".v1-agent"
PROMPT_FILE = f"{AGENT_DIR}/prompt.md"
SYSTEM_FILE = f"{AGENT_DIR}/system.md"
SCRIPT_FILE = f"{AGENT_DIR}/run.sh"


class AgentConfig(HarnessConfig):
    """Config of a CLI-agent harness: a `HarnessConfig` plus the agent's version, arguments and environment.

    `program` is built by the harness; set `sandbox` to change the sandbox (a local one by default).
    """

    version: str = ""
    """The package version to install; empty: the harness's pinned version."""
    extra_args: list[str] = Field(default_factory=list)
    """Appended to the agent's command line."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the agent."""
    files: dict[str, str] = Field(default_factory=dict)
    """Files written into the workspace before the agent runs (`{"path": "content"}`)."""
    artifacts: list[ArtifactConfig] = Field(default_factory=list)
    """Files collected from the workspace after the agent ran (see docs/sandbox.md)."""
    install_timeout: float = Field(600.0, gt=0)
    """Seconds the one install of the agent's package on this machine may take."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def prompt_text(state: vf.State) -> str:
    """The rollout's prompt for an agent that takes one text: its user (and assistant) turns, in order."""
    turns = [message for message in state["prompt"] if message.get("role") not in ("system", "developer")]
    return "\n\n".join(_text(message.get("content")) for message in turns).strip()


def system_text(state: vf.State) -> str:
    """The rollout's system prompt as text (empty when it has none)."""
    turns = [message for message in state["prompt"] if message.get("role") in ("system", "developer")]
    return "\n\n".join(_text(message.get("content")) for message in turns).strip()


def answered(state: vf.State) -> bool:
    """Whether the rollout's last model call returned an answer rather than tool calls."""
    trajectory = state["trajectory"]
    if not trajectory:
        return False
    last = trajectory[-1]["completion"][-1]
    return not last.get("tool_calls") and bool(last.get("content"))


class AgentProgram:
    """A `CommandProgram` that first makes sure the agent is installed, and forgives a non-zero exit after an answer."""

    handles_timeout = True

    def __init__(self, command: CommandProgram, package: AgentPackage | None, install_timeout: float) -> None:
        self.command = command
        self.package = package
        self.install_timeout = install_timeout

    async def __call__(self, task: vf.Task, state: vf.State, context: RolloutContext) -> None:
        if self.package is not None:
            await self.package.install(self.install_timeout)
        try:
            await self.command(task, state, context)
        except ProgramError:
            result = state.get("program_result") or {}
            if result.get("exit_code") in (None, 0) or not answered(state):
                raise


class AgentHarness(vf.Harness):
    """A harness running a CLI agent; subclasses name the package and write `script()`. See the module docs."""

    config_type: ClassVar[type[HarnessConfig]] = AgentConfig
    package_name: ClassVar[str] = ""
    executable: ClassVar[str] = ""
    default_version: ClassVar[str] = ""
    default_env: ClassVar[dict[str, str]] = {}

    def __init__(self, config: AgentConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        config_ = self.agent_config
        if config_.program is not None:
            raise vf.ConfigError(f"{type(self).__name__} builds its own program; leave 'program' unset")
        package = self.agent_package()
        sandbox = config_.sandbox or SandboxConfig()
        host_install = package is not None and sandbox.backend == "local"
        if package is None:
            where = AgentInstall()
        elif host_install:
            cache_root().mkdir(parents=True, exist_ok=True)
            sandbox = sandbox.model_copy(update={"mounts": {**sandbox.mounts, MOUNT_POINT: str(cache_root())}})
            where = package.mounted(MOUNT_POINT)
        else:
            packages, where = package.in_sandbox(sandbox.workdir)
            sandbox = sandbox.model_copy(update={"packages": [*sandbox.packages, *packages]})
        bin_dir = where.bin_dir
        env = {**self.default_env, **where.env, **config_.agent_env, "V1_PROMPT_FILE": PROMPT_FILE, "V1_SYSTEM_FILE": SYSTEM_FILE}
        script = f'export PATH="{bin_dir}:$PATH"\n' if bin_dir else ""
        program = ProgramConfig(
            command=["sh", SCRIPT_FILE],
            files={**config_.files, **self.agent_files(), SCRIPT_FILE: script + self.script()},
            env=env,
            bindings={f"files.{PROMPT_FILE}": _prompt_binding, f"files.{SYSTEM_FILE}": _system_binding},
            artifacts=config_.artifacts,
        )
        self.config = config_.model_copy(update={"program": program, "sandbox": sandbox})
        self.host_package = package if host_install else None
        self.program = AgentProgram(CommandProgram(program), self.host_package, config_.install_timeout)

    def build_program(self, spec: Any, task_sandbox: Mapping[str, Any] | None = None) -> Program:
        """A task's override of the agent's command keeps the install step and the lenient exit."""
        program = super().build_program(spec, task_sandbox)
        if isinstance(program, CommandProgram):
            return AgentProgram(program, self.host_package, self.agent_config.install_timeout)
        return program

    @property
    def agent_config(self) -> AgentConfig:
        assert isinstance(self.config, AgentConfig)
        return self.config

    def agent_package(self) -> AgentPackage | None:
        """The agent's pinned package (None: nothing to install); an npm package named by the class by default."""
        if not self.package_name:
            return None
        return NpmPackage(self.package_name, self.agent_config.version or self.default_version, self.executable)

    def agent_files(self) -> dict[str, str]:
        """Files the agent itself needs in the workspace (`{"path": "content"}`); none by default."""
        return {}

    def script(self) -> str:
        """The shell script that runs the agent once, non-interactively, on `$V1_PROMPT_FILE` (each agent defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define script()")

    def extra_args(self) -> str:
        """The config's `extra_args`, quoted for the script."""
        return " ".join(shlex.quote(arg) for arg in self.agent_config.extra_args)


def _prompt_binding(state: vf.State) -> str:
    return prompt_text(state)


def _system_binding(state: vf.State) -> str:
    return system_text(state)


__all__ = ["AgentConfig", "AgentHarness", "AgentProgram", "answered", "prompt_text", "system_text"]
