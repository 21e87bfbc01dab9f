"""Recursive LM: the model can hand a sub-question to a fresh copy of itself, which can do the same, to a depth limit.

The rollout's model gets one more tool, `llm_query(prompt)`. A call runs a *child
rollout*: `state.for_task({"prompt": prompt}, borrow=["model"], tools=...)` run by
an `RLMHarness` one level deeper, so the child uses the same model, client and
sampling args, the parent's tools (except `llm_query` itself, which the child has
as its own while it is above `max_depth`), and the harness's system prompt and
program (the base tool loop by default). The tool returns the child's final
answer. Sub-calls of one turn run concurrently, like any tool calls.

Each child is a full rollout with its own endpoint session, so its model calls
are its own trajectory, never steps of the parent's. The parent's state keeps
the tree: `state["rlm_calls"]` holds one record per sub-call, in order of
completion (`trajectory_id`, `parent_id`, `depth`, `prompt`, `answer`,
`trajectory`, `token_usage`, `stop_condition`, `error`, and its own
`rlm_calls`). `state["rlm_usage"]` sums every descendant's calls and tokens
(the rollout's own tokens stay in `token_usage`), and the metric `rlm_calls`
counts the sub-calls below the rollout. A rollout makes at most `max_calls`
sub-calls; past that, and for a child that fails, the tool answers with an error
message instead.

Children are not scored (rewards and handlers of the config apply to the root
rollout only).

    [env.harness]
    loader = "harnesses.rlm:RLMHarness"
    max_depth = 2
    max_calls = 8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

import v1 as vf
from v1.config import HarnessConfig

TOOL_NAME = "llm_query"
HANDLER_LISTS = ("stops", "setups", "updates", "metrics", "rewards", "advantages", "cleanups")


class RLMConfig(HarnessConfig):
    """`HarnessConfig` for recursive LMs: how deep sub-calls go and how many a rollout may make."""

    max_depth: int = Field(2, ge=0, le=16)
    """Levels of sub-calls below the root rollout (0: no `llm_query` at all)."""
    max_calls: int = Field(8, ge=1)
    """Sub-calls one rollout may make (each child has the same budget for its own)."""


def _answer(child: vf.State) -> str:
    if child["error"] is not None:
        return f"Error: the sub-call failed: {child['error']['message']}"
    for message in reversed(child.get("completion") or []):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str) and message["content"]:
            return str(message["content"])
    return f"Error: the sub-call ended without an answer ({child['stop_condition']})"


def _usage(record: Mapping[str, Any]) -> dict[str, float]:
    """A sub-call's cost: its own tokens plus its descendants'."""
    own, below = record.get("token_usage") or {}, record.get("rlm_usage") or {}
    return {
        "calls": 1 + float(below.get("calls", 0)),
        "input_tokens": float(own.get("input_tokens", 0)) + float(below.get("input_tokens", 0)),
        "output_tokens": float(own.get("output_tokens", 0)) + float(below.get("output_tokens", 0)),
    }


class RLMHarness(vf.Harness):
    """A harness whose model can call itself through `llm_query`; see the module docs.

    Args:
        depth: this harness's level (0 for the root; children are built one deeper).
    """

    config_type = RLMConfig

    def __init__(self, config: RLMConfig | Mapping[str, Any] | None = None, *, depth: int = 0, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self.depth = depth
        self._child: RLMHarness | None = None
        self._started: dict[str, int] = {}  # sub-calls started, per rollout in flight
        if depth < self.rlm_config.max_depth:
            self.toolsets.append(vf.Toolset([self.llm_query], name="rlm", bindings={"llm_query.state": "state"}, write=True))
            self.taskset = self.taskset  # checks the new toolset's names against the others

    @property
    def rlm_config(self) -> RLMConfig:
        assert isinstance(self.config, RLMConfig)
        return self.config

    def child_harness(self) -> RLMHarness:
        """The harness of this harness's sub-calls: the same config one level deeper, without handlers or toolsets."""
        if self._child is None:
            update: dict[str, Any] = {name: [] for name in HANDLER_LISTS}
            child = RLMHarness(config=self.rlm_config.model_copy(update={**update, "toolsets": []}), depth=self.depth + 1)
            child.client = self.client
            child.score_rollouts = False
            self._child = child
        return self._child

    async def llm_query(self, prompt: str, state: vf.State) -> str:
        """Ask a fresh copy of yourself a self-contained question (it sees only this prompt and has your tools); returns its final answer.

        Args:
            prompt: the whole question, with every piece of context the answer needs.
        """
        calls = state.setdefault("rlm_calls", [])
        started = self._started.get(state["trajectory_id"], 0)
        if started >= self.rlm_config.max_calls:
            return f"Error: this rollout used all of its {self.rlm_config.max_calls} llm_query calls; answer yourself"
        self._started[state["trajectory_id"]] = started + 1  # counted at the start: calls of one turn run concurrently
        tools = [name for name in state.get_tools() if name != TOOL_NAME]
        child = state.for_task({"prompt": prompt}, borrow=["model"], tools=tools)
        child = await self.child_harness().run(child.task, child)
        record = {
            "trajectory_id": child["trajectory_id"],
            "parent_id": state["trajectory_id"],
            "depth": self.depth + 1,
            "prompt": prompt,
            "answer": _answer(child),
            "trajectory": child["trajectory"],
            "token_usage": dict(child.get("token_usage") or {}),
            "stop_condition": child["stop_condition"],
            "error": child["error"],
            "rlm_calls": child.get("rlm_calls", []),
            "rlm_usage": child.get("rlm_usage", {}),
        }
        calls.append(record)
        return str(record["answer"])

    @vf.update
    def account_sub_calls(self, state: vf.State) -> None:
        """`state["rlm_usage"]`: the calls and tokens of every sub-call below this rollout."""
        self._started.pop(state["trajectory_id"], None)
        total = {"calls": 0.0, "input_tokens": 0.0, "output_tokens": 0.0}
        for record in state.get("rlm_calls") or []:
            for key, value in _usage(record).items():
                total[key] += value
        state["rlm_usage"] = total

    @vf.metric
    def rlm_calls(self, state: vf.State) -> float:
        """Sub-calls below this rollout, at every depth."""
        return float((state.get("rlm_usage") or {}).get("calls", 0.0))


__all__ = ["RLMConfig", "RLMHarness"]
