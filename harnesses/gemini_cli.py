"""Gemini CLI (npm `@google/gemini-cli`), run with `gemini -p` against the rollout's endpoint (the Gemini
`streamGenerateContent` dialect).

Gemini CLI's gateway mode points it at the endpoint: `GOOGLE_GEMINI_BASE_URL` is the
rollout's URL (without `/v1`; the CLI appends `/v1beta/models/...`) and `GEMINI_API_KEY`
the rollout's own key, sent as `x-goog-api-key`. Its settings (`$HOME/.gemini/settings.json`
in the workspace) turn off auto-update, update notices, usage statistics and
telemetry; the workspace is trusted and every tool call approved (`--approval-mode
yolo`; the rollout's sandbox is the boundary). When the rollout has visible tools they
are its MCP server `v1` (`httpUrl` = `$V1_MCP_URL`, the rollout's key as bearer token,
`trust`), so the model sees `mcp_v1_<tool>`. The system prompt, if any, comes before the
task's prompt.

    [env.harness]
    loader = "harnesses.gemini_cli:GeminiCliHarness"
    version = "0.61.0"          # optional: the pinned default
"""

from __future__ import annotations

from typing import ClassVar

from harnesses.agent import AgentHarness

VERSION = "0.61.0"


class GeminiCliHarness(AgentHarness):
    """Gemini CLI as a harness; see the module docs."""

    package_name: ClassVar[str] = "@google/gemini-cli"
    executable: ClassVar[str] = "gemini"
    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_TELEMETRY_ENABLED": "false",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "NO_COLOR": "1",
    }

    def script(self) -> str:
        return f"""prompt="$(cat "$V1_PROMPT_FILE")"
if [ -s "$V1_SYSTEM_FILE" ]; then prompt="$(cat "$V1_SYSTEM_FILE")

$prompt"; fi
mcp=""
if [ -n "$V1_MCP_URL" ]; then
  mcp=', "mcpServers": {{"v1": {{"httpUrl": "'"$V1_MCP_URL"'", "trust": true,
    "headers": {{"Authorization": "Bearer '"$OPENAI_API_KEY"'"}}}}}}'
fi
mkdir -p "$HOME/.gemini"
cat > "$HOME/.gemini/settings.json" <<JSON
{{"general": {{"enableAutoUpdate": false, "enableAutoUpdateNotification": false}},
  "security": {{"auth": {{"selectedType": "gemini-api-key"}}}},
  "privacy": {{"usageStatisticsEnabled": false}}, "telemetry": {{"enabled": false}}$mcp}}
JSON
export GOOGLE_GEMINI_BASE_URL="${{OPENAI_BASE_URL%/v1}}" GEMINI_API_KEY="$OPENAI_API_KEY"
exec gemini -m "$V1_MODEL" --approval-mode yolo {self.extra_args()} -p "$prompt" </dev/null
"""


__all__ = ["VERSION", "GeminiCliHarness"]
