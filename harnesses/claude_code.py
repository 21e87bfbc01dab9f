"""Claude Code (npm `@anthropic-ai/claude-code`), run with `claude -p` against the rollout's endpoint (Anthropic
Messages, streaming).

Claude Code reads `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY` (the rollout's own
key); permission prompts are bypassed (the rollout's sandbox is the boundary),
telemetry, auto-update and other traffic are off, and the system prompt, if any,
is appended to Claude Code's own. When the rollout has visible tools, they are
Claude Code's MCP server `v1` (tools `mcp__v1__<name>`), the only one it loads. `$HOME/.claude` is in the workspace.

    [env.harness]
    loader = "harnesses.claude_code:ClaudeCodeHarness"
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from harnesses.agent import AgentConfig, AgentHarness

VERSION = "2.1.330"


class ClaudeCodeConfig(AgentConfig):
    """`AgentConfig` for Claude Code, plus its allowed tools."""

    allowed_tools: list[str] = Field(default_factory=list)
    """Claude Code's `--allowedTools`; empty: all of its tools."""


class ClaudeCodeHarness(AgentHarness):
    """Claude Code as a harness; see the module docs."""

    config_type = ClaudeCodeConfig
    package_name: ClassVar[str] = "@anthropic-ai/claude-code"
    executable: ClassVar[str] = "claude"
    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        "ENABLE_TOOL_SEARCH": "false",
    }

    def script(self) -> str:
        config = self.config
        assert isinstance(config, ClaudeCodeConfig)
        allowed = f" --allowedTools {','.join(config.allowed_tools)}" if config.allowed_tools else ""
        return f"""set -- --model "$V1_MODEL" --output-format json --permission-mode bypassPermissions{allowed}
if [ -s "$V1_SYSTEM_FILE" ]; then set -- "$@" --append-system-prompt "$(cat "$V1_SYSTEM_FILE")"; fi
if [ -n "$V1_MCP_URL" ]; then
  auth="{{\\"Authorization\\": \\"Bearer $ANTHROPIC_API_KEY\\"}}"
  set -- "$@" --strict-mcp-config --mcp-config \\
    "{{\\"mcpServers\\": {{\\"v1\\": {{\\"type\\": \\"http\\", \\"url\\": \\"$V1_MCP_URL\\", \\"headers\\": $auth}}}}}}"
fi
exec claude -p "$(cat "$V1_PROMPT_FILE")" "$@" {self.extra_args()} </dev/null
"""


__all__ = ["VERSION", "ClaudeCodeConfig", "ClaudeCodeHarness"]
