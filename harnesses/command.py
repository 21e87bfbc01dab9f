"""Any agent CLI that takes an OpenAI- or Anthropic-compatible base URL, as a harness.

`command` is the agent's command line; an argument `{prompt}` is replaced by the
task's prompt text and `{system}` by its system prompt. The agent finds the
rollout's endpoint in `OPENAI_BASE_URL`/`OPENAI_API_KEY` or
`ANTHROPIC_BASE_URL`/`ANTHROPIC_API_KEY` and the model in `V1_MODEL`;
`endpoint_env` exports them under the names the agent reads as well. An optional
npm package (`npm_package` at `npm_version`) is installed like the other agents'.

    [env.harness]
    loader = "harnesses.command:CommandAgentHarness"
    command = ["my-agent", "--model", "{model}", "--task", "{prompt}"]
    endpoint_env = { MY_AGENT_URL = "openai_base_url", MY_AGENT_KEY = "api_key" }
"""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import Field

from harnesses.agent import AgentConfig, AgentHarness
from harnesses.npm import NpmPackage
from harnesses.packages import AgentPackage

EndpointValue = Literal["openai_base_url", "anthropic_base_url", "api_key", "model"]
SOURCES: dict[str, str] = {
    "openai_base_url": "OPENAI_BASE_URL",
    "anthropic_base_url": "ANTHROPIC_BASE_URL",
    "api_key": "OPENAI_API_KEY",
    "model": "V1_MODEL",
}
PLACEHOLDERS = {
    "{prompt}": '"$(cat "$V1_PROMPT_FILE")"',
    "{system}": '"$(cat "$V1_SYSTEM_FILE")"',
    "{model}": '"$V1_MODEL"',
}


class CommandAgentConfig(AgentConfig):
    """`AgentConfig` for a generic agent command; see the module docs."""

    command: list[str] = Field(min_length=1)
    endpoint_env: dict[str, EndpointValue] = Field(default_factory=dict)
    npm_package: str | None = None
    npm_version: str = "latest"
    executable: str | None = None
    """The npm package's executable (default: the last part of its name)."""


class CommandAgentHarness(AgentHarness):
    """A generic agent CLI as a harness; see the module docs."""

    config_type = CommandAgentConfig

    def agent_package(self) -> AgentPackage | None:
        config = self.config
        assert isinstance(config, CommandAgentConfig)
        if config.npm_package is None:
            return None
        executable = config.executable or config.npm_package.rsplit("/", 1)[-1]
        return NpmPackage(config.npm_package, config.version or config.npm_version, executable)

    def script(self) -> str:
        config = self.config
        assert isinstance(config, CommandAgentConfig)
        exports = "".join(f'export {name}="${SOURCES[value]}"\n' for name, value in config.endpoint_env.items())
        argv = [PLACEHOLDERS.get(arg, shlex.quote(arg)) for arg in [*config.command, *config.extra_args]]
        return f"{exports}exec {' '.join(argv)} </dev/null\n"


__all__ = ["CommandAgentConfig", "CommandAgentHarness"]
