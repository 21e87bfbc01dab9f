"""Reusable harnesses: real agent CLIs, unmodified, run in the rollout's sandbox against its endpoint."""

from harnesses.agent import AgentConfig, AgentHarness
from harnesses.claude_code import ClaudeCodeConfig, ClaudeCodeHarness
from harnesses.codex import CodexConfig, CodexHarness
from harnesses.command import CommandAgentConfig, CommandAgentHarness
from harnesses.gemini_cli import GeminiCliHarness
from harnesses.mini_swe_agent import MiniSweAgentHarness
from harnesses.openai_agents import OpenAIAgentsConfig, OpenAIAgentsHarness
from harnesses.opencode import OpenCodeHarness
from harnesses.pi import PiHarness
from harnesses.replay import ReplayConfig, ReplayHarness
from harnesses.rlm import RLMConfig, RLMHarness
from harnesses.terminus import TerminusConfig, TerminusHarness

__all__ = [
    "AgentConfig",
    "AgentHarness",
    "ClaudeCodeConfig",
    "ClaudeCodeHarness",
    "CodexConfig",
    "CodexHarness",
    "CommandAgentConfig",
    "CommandAgentHarness",
    "GeminiCliHarness",
    "MiniSweAgentHarness",
    "OpenAIAgentsConfig",
    "OpenAIAgentsHarness",
    "OpenCodeHarness",
    "PiHarness",
    "RLMConfig",
    "RLMHarness",
    "ReplayConfig",
    "ReplayHarness",
    "TerminusConfig",
    "TerminusHarness",
]
