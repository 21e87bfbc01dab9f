"""Codex CLI (npm `@openai/codex`), run with `codex exec` against the rollout's endpoint (Responses API over SSE).

Codex gets a model provider of its own, `v1`, whose `base_url` is the rollout's
`OPENAI_BASE_URL` and whose key is the rollout's `OPENAI_API_KEY`; its own
sandbox and approvals are off (the rollout's sandbox is the boundary). When the
rollout has visible tools, they are Codex's MCP server `v1` (`$V1_MCP_URL`, the
rollout's key as bearer token). The system prompt, if any, comes before the task's prompt. `CODEX_HOME` is
`$HOME/.codex` in the workspace.

    [env.harness]
    loader = "harnesses.codex:CodexHarness"
    version = "0.169.0"          # optional: the pinned default
"""

from __future__ import annotations

from typing import ClassVar

from harnesses.agent import AgentConfig, AgentHarness

VERSION = "0.169.0"


class CodexConfig(AgentConfig):
    """`AgentConfig` for Codex CLI, plus its reasoning effort."""

    reasoning_effort: str | None = None
    """Codex's `model_reasoning_effort` (`low`, `medium`, `high`); unset: Codex's default."""


class CodexHarness(AgentHarness):
    """Codex CLI as a harness; see the module docs."""

    config_type = CodexConfig
    package_name: ClassVar[str] = "@openai/codex"
    executable: ClassVar[str] = "codex"
    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {"CODEX_DISABLE_UPDATE_CHECK": "1", "NO_COLOR": "1"}

    def script(self) -> str:
        config = self.config
        assert isinstance(config, CodexConfig)
        effort = f" -c model_reasoning_effort={config.reasoning_effort}" if config.reasoning_effort else ""
        return f"""prompt="$(cat "$V1_PROMPT_FILE")"
if [ -s "$V1_SYSTEM_FILE" ]; then prompt="$(cat "$V1_SYSTEM_FILE")

$prompt"; fi
set -- -m "$V1_MODEL" -c model_provider=v1 -c model_providers.v1.name=v1 \\
  -c "model_providers.v1.base_url=\\"$OPENAI_BASE_URL\\"" -c model_providers.v1.env_key=OPENAI_API_KEY \\
  -c model_providers.v1.wire_api=responses{effort}
if [ -n "$V1_MCP_URL" ]; then
  set -- "$@" -c "mcp_servers.v1.url=\\"$V1_MCP_URL\\"" -c mcp_servers.v1.bearer_token_env_var=OPENAI_API_KEY
fi
exec codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --color never \\
  "$@" {self.extra_args()} -- "$prompt" </dev/null
"""


__all__ = ["VERSION", "CodexConfig", "CodexHarness"]
