"""OpenCode (npm `opencode-ai`), run with `opencode run` against the rollout's endpoint (Chat Completions, streaming).

OpenCode gets a provider of its own, `v1` (the OpenAI-compatible provider), in
`$HOME/.config/opencode/opencode.json` (in the workspace): `baseURL` is the rollout's
`OPENAI_BASE_URL`, the key is read from `OPENAI_API_KEY` (the rollout's own), the model
is `V1_MODEL`; when the rollout has visible tools they are its remote MCP server `v1`.

    [env.harness]
    loader = "harnesses.opencode:OpenCodeHarness"
"""

from __future__ import annotations

from typing import ClassVar

from harnesses.agent import AgentHarness

VERSION = "1.18.33"


class OpenCodeHarness(AgentHarness):
    """OpenCode as a harness; see the module docs."""

    package_name: ClassVar[str] = "opencode-ai"
    executable: ClassVar[str] = "opencode"
    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_PERMISSION": '{"*": "allow"}',
    }

    def script(self) -> str:
        return f"""mkdir -p "$HOME/.config/opencode"
mcp=""
if [ -n "$V1_MCP_URL" ]; then
  mcp=", \\"mcp\\": {{\\"v1\\": {{\\"type\\": \\"remote\\", \\"url\\": \\"$V1_MCP_URL\\", \\"headers\\": {{\\"Authorization\\": \\"Bearer $OPENAI_API_KEY\\"}}}}}}"
fi
cat > "$HOME/.config/opencode/opencode.json" <<JSON
{{"\\$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
  "provider": {{"v1": {{"npm": "@ai-sdk/openai-compatible", "name": "v1",
    "options": {{"baseURL": "$OPENAI_BASE_URL", "apiKey": "{{env:OPENAI_API_KEY}}"}},
    "models": {{"$V1_MODEL": {{"name": "$V1_MODEL"}}}}}}}}$mcp}}
JSON
exec opencode run --model "v1/$V1_MODEL" {self.extra_args()} "$(cat "$V1_PROMPT_FILE")" </dev/null
"""


__all__ = ["VERSION", "OpenCodeHarness"]
