"""Pi (npm `@mariozechner/pi-coding-agent`), run with `pi -p` against the rollout's endpoint (Chat Completions,
streaming).

Pi gets a provider of its own, `v1`, in `$HOME/.pi/agent/models.json` (in the workspace):
`baseUrl` is the rollout's `OPENAI_BASE_URL`, the key is read from `OPENAI_API_KEY`
(the rollout's own), the model is `V1_MODEL`. Sessions are not saved, start-up network
checks are off, and the system prompt, if any, is appended to Pi's own. Pi has no MCP
client, so a rollout's toolsets are not offered to it.

    [env.harness]
    loader = "harnesses.pi:PiHarness"
"""

from __future__ import annotations

from typing import ClassVar

from harnesses.agent import AgentHarness

VERSION = "0.73.1"


class PiHarness(AgentHarness):
    """Pi as a harness; see the module docs."""

    package_name: ClassVar[str] = "@mariozechner/pi-coding-agent"
    executable: ClassVar[str] = "pi"
    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}

    def script(self) -> str:
        return f"""mkdir -p "$HOME/.pi/agent"
cat > "$HOME/.pi/agent/models.json" <<JSON
{{"providers": {{"v1": {{"baseUrl": "$OPENAI_BASE_URL", "api": "openai-completions", "apiKey": "OPENAI_API_KEY",
  "models": [{{"id": "$V1_MODEL"}}]}}}}}}
JSON
set -- -p --no-session --provider v1 --model "$V1_MODEL"
if [ -s "$V1_SYSTEM_FILE" ]; then set -- "$@" --append-system-prompt "$(cat "$V1_SYSTEM_FILE")"; fi
exec pi "$@" {self.extra_args()} "$(cat "$V1_PROMPT_FILE")" </dev/null
"""


__all__ = ["VERSION", "PiHarness"]
