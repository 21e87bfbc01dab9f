"""A terminal agent in the style of Terminus: the model sees a tmux screen and answers with keystrokes.

Each turn the model gets the terminal screen and answers with one JSON object:
`analysis`, `plan`, `commands` (each `{"keystrokes": "ls\\n", "duration": 1.0}`
or `{"keys": ["C-c"]}`), `task_complete`, and optionally `tool_calls`
(`[{"name", "arguments"}]`) for the rollout's tools, which it reaches over the
rollout's MCP server. Keystrokes go into bash in a tmux session with `tmux
send-keys`; the screen comes back with `tmux capture-pane`. A command that
presses Enter waits at most its `duration` (capped by `max_duration`), less
when the shell prompt comes back.

The agent (`harnesses/terminus_agent.py`, standard library only) runs *inside*
the rollout's sandbox as a command program, like the CLI agents: tmux and
the shell are local to it (no sandbox round trip per keystroke or screen), it
works the same on every sandbox backend, it calls the model through the
rollout's endpoint over HTTP like every other program, and it gets the same
install-free, lenient-exit treatment as the other agent harnesses. The sandbox
needs `python3` and `tmux` (Debian package `tmux`; the local backend uses the
host's).

    [env.harness]
    loader = "harnesses.terminus:TerminusHarness"
    max_turns = 30
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from harnesses.agent import AGENT_DIR, AgentConfig, AgentHarness

AGENT_FILE = f"{AGENT_DIR}/terminus.py"
AGENT_SOURCE = Path(__file__).with_name("terminus_agent.py")


class TerminusConfig(AgentConfig):
    """`AgentConfig` for the terminal agent: the terminal's size and the longest wait per command."""

    width: int = Field(160, ge=20, le=1000)
    height: int = Field(48, ge=5, le=500)
    max_duration: float = Field(60.0, gt=0)
    """Seconds a command may ask to wait before the next screen, at most."""


class TerminusHarness(AgentHarness):
    """The tmux terminal agent as a harness; see the module docs."""

    config_type = TerminusConfig

    def agent_files(self) -> dict[str, str]:
        return {AGENT_FILE: AGENT_SOURCE.read_text()}

    def script(self) -> str:
        config = self.config
        assert isinstance(config, TerminusConfig)
        return (
            f"export TERMINUS_WIDTH={config.width} TERMINUS_HEIGHT={config.height} "
            f"TERMINUS_MAX_DURATION={config.max_duration}\n"
            f"exec python3 {AGENT_FILE} {self.extra_args()} </dev/null\n"
        )


__all__ = ["TerminusConfig", "TerminusHarness"]
