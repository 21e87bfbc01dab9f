"""mini-SWE-agent (PyPI `mini-swe-agent`), run with its `mini` command against the rollout's endpoint (Chat
Completions through litellm, not streamed).

The agent is installed once per machine into a virtual environment of its own
(`harnesses.pypi`) and runs as `python -m minisweagent.run.mini` with that
environment's interpreter, in yolo mode (no confirmations) and exiting when the
model submits (its action `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`). Its
model is `openai/$V1_MODEL` with `api_base` = the rollout's `OPENAI_BASE_URL`
and litellm's key from `OPENAI_API_KEY` (the rollout's own); its first-run setup,
start-up banner, cost tracking (the endpoint's model has no price) and its own
retries (the endpoint retries the upstream) are off, and litellm reads its
bundled model map instead of fetching one. A system prompt, if any, replaces
mini's one-line system template (the task's text is never read as a template).
Its trajectory file is `.v1-agent/mini.traj.json` in the workspace (collect it
with `artifacts`). mini-SWE-agent has no MCP client, so a rollout's toolsets are
not offered to it.

    [env.harness]
    loader = "harnesses.mini_swe_agent:MiniSweAgentHarness"
    version = "2.4.6"          # optional: the pinned default
"""

from __future__ import annotations

from typing import ClassVar

from harnesses.agent import AGENT_DIR, AgentHarness
from harnesses.packages import AgentPackage
from harnesses.pypi import PYTHON_ENV, PypiPackage

VERSION = "2.4.6"
LITELLM = "litellm[mcp]==1.106.2"
"""litellm speaks HTTP for mini-SWE-agent; pinned with it so an install next month sends the same requests.
Its `mcp` extra because this litellm imports `mcp` on every call that has tools."""
TRAJECTORY_FILE = f"{AGENT_DIR}/mini.traj.json"


class MiniSweAgentHarness(AgentHarness):
    """mini-SWE-agent as a harness; see the module docs."""

    default_version: ClassVar[str] = VERSION
    default_env: ClassVar[dict[str, str]] = {
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "NO_COLOR": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }

    def agent_package(self) -> AgentPackage:
        return PypiPackage("mini-swe-agent", self.agent_config.version or VERSION, (LITELLM,))

    def script(self) -> str:
        return f"""set -- -m "openai/$V1_MODEL" -c mini.yaml -c "model.model_kwargs.api_base=$OPENAI_BASE_URL" -l 0
if [ -s "$V1_SYSTEM_FILE" ]; then
  set -- "$@" -c "agent.system_template={{% raw %}}$(cat "$V1_SYSTEM_FILE"){{% endraw %}}"
fi
exec "${PYTHON_ENV}" -m minisweagent.run.mini "$@" -y --exit-immediately -o {TRAJECTORY_FILE} {self.extra_args()} \\
  -t "$(cat "$V1_PROMPT_FILE")" </dev/null
"""


__all__ = ["LITELLM", "TRAJECTORY_FILE", "VERSION", "MiniSweAgentHarness"]
