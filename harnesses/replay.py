"""Replays saved rollouts (a run's results.jsonl) through the endpoint: the same steps again, without a model.

Each rollout finds its saved record by `(example_id, rollout_index)` (the index is
the rollout's position in its group, so replay groups of the saved size, without
`independent_scoring`), checks that the task is still the one that was run (the
same prompt and the same tool names), and posts each saved step's prompt to the
rollout's endpoint. The endpoint's upstream for a replayed rollout is the
recording (`ReplayClient`): it answers each call with the saved response of that
step, after checking the prompt is the saved one. So the endpoint records the
same steps as the original run, scoring runs on them as usual, and the result is
a normal `State`/results.jsonl (SFT data from a filtered run; a failing rollout
to step through while debugging). Tools are not run again: tool results come
from the saved prompts.

A replay that diverges (the task changed, a step's prompt is not the saved one,
more calls than saved steps, or no saved rollout at all) fails the rollout with
`ReplayDivergedError`, saying where.

    [env.harness]
    loader = "harnesses.replay:ReplayHarness"
    results = "outputs/evals/my-run/results.jsonl"   # or the run folder
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

import v1 as vf
from v1.clients import Client
from v1.config import HarnessConfig
from v1.env import RESULTS_FILE
from v1.types import Messages, Response, SamplingArgs, Tool

RecordKey = tuple[Any, int]


class ReplayDivergedError(vf.ModelRequestError):
    """The replayed rollout is not the saved one: the task or a step's prompt changed, or nothing was saved for it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=409)


class ReplayConfig(HarnessConfig):
    """`HarnessConfig` for replays: where the saved rollouts are."""

    results: str
    """A results.jsonl file, or the run folder holding one."""
    model: str | None = "replay"
    max_turns: int = Field(10_000, ge=1)
    """Replays make as many calls as the saved rollout made."""


def load_records(path: str | Path) -> dict[RecordKey, dict[str, Any]]:
    """The saved rollouts of a results.jsonl (or a run folder) by `(example_id, rollout_index)`.

    Raises:
        ConfigError: the file is missing, a line is not a JSON object, or a record has no key or trajectory.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise vf.ConfigError(f"replay results: cannot read {path}: {exc.strerror or exc}") from None
    records: dict[RecordKey, dict[str, Any]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise vf.ConfigError(f"replay results: {path} line {number} is not JSON: {exc}") from None
        if not isinstance(record, dict) or not isinstance(record.get("rollout_index"), int):
            raise vf.ConfigError(f"replay results: {path} line {number} is not a saved rollout (no rollout_index)")
        if not isinstance(record.get("trajectory"), list):
            raise vf.ConfigError(f"replay results: {path} line {number} has no trajectory (was it saved with one?)")
        records[(record.get("example_id"), record["rollout_index"])] = record
    return records


def first_difference(saved: Any, current: Any, where: str) -> str | None:
    """Where two JSON values first differ (`prompt[1].content`), or None when they are equal."""
    if type(saved) is not type(current):
        return where
    if isinstance(saved, dict):
        for key in sorted(set(saved) | set(current), key=str):
            found = first_difference(saved.get(key), current.get(key), f"{where}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(saved, list):
        for index, (a, b) in enumerate(zip(saved, current)):
            found = first_difference(a, b, f"{where}[{index}]")
            if found is not None:
                return found
        return None if len(saved) == len(current) else f"{where} (length {len(saved)} saved, {len(current)} now)"
    return None if saved == current else where


class ReplayClient(Client[None, Messages, Response, Tool]):
    """An upstream that answers each call of a replayed rollout with its saved step's response."""

    client_type = "replay"

    def __init__(self) -> None:
        super().__init__(None)
        self.expected: dict[str, list[dict[str, Any]]] = {}

    def expect(self, trajectory_id: str, steps: list[dict[str, Any]]) -> None:
        """The saved steps the rollout `trajectory_id` replays, in order."""
        self.expected[trajectory_id] = steps

    def forget(self, trajectory_id: str) -> None:
        self.expected.pop(trajectory_id, None)

    def setup_client(self, config: vf.ClientConfig) -> None:
        return None

    def to_native_prompt(self, messages: Messages) -> tuple[Messages, dict[str, Any]]:
        return messages, {}

    def to_native_tool(self, tool: Tool) -> Tool:
        return tool

    async def get_native_response(
        self, prompt: Messages, model: str, sampling_args: SamplingArgs, tools: list[Tool] | None, **kwargs: Any
    ) -> Response:
        state = kwargs.get("state")
        steps = self.expected.get(state["trajectory_id"]) if state is not None else None
        if state is None or steps is None:
            raise ReplayDivergedError("this rollout has no saved steps to replay")
        index = len(state["trajectory"])
        if index >= len(steps):
            raise ReplayDivergedError(f"the replay made more model calls than the {len(steps)} saved")
        difference = first_difference(steps[index]["prompt"], list(prompt), "prompt")
        if difference is not None:
            raise ReplayDivergedError(f"step {index}: the prompt differs from the saved one at {difference}")
        return Response.model_validate(steps[index]["response"])

    def raise_from_native_response(self, response: Response) -> None:
        return None

    def from_native_response(self, response: Response) -> Response:
        return response


def _tool_payload(definition: Mapping[str, Any]) -> dict[str, Any]:
    function = {key: definition[key] for key in ("name", "description", "parameters", "strict") if key in definition}
    return {"type": "function", "function": function}


class ReplayHarness(vf.Harness):
    """Replays saved rollouts through the endpoint; see the module docs."""

    config_type = ReplayConfig

    def __init__(self, config: ReplayConfig | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        assert isinstance(self.config, ReplayConfig)
        if self.config.program is not None:
            raise vf.ConfigError("ReplayHarness replays saved steps; leave 'program' unset")
        self.results = self.config.results
        self.records = load_records(self.results)
        self.replayer = ReplayClient()
        if self.client is None and self.config.client is None:
            self.client = self.replayer
        self._indexes: dict[str, int] = {}
        self.program = self.replay

    async def run_group(self, tasks: list[vf.Task], states: list[vf.State] | None = None) -> list[vf.State]:
        """Runs the group; the i-th rollout replays the saved rollout with `rollout_index` i."""
        tasks = [self._as_task(task) for task in tasks]
        states = states if states is not None else [vf.State.for_task(task) for task in tasks]
        for index, state in enumerate(states):
            self._indexes[state["trajectory_id"]] = index
        return await super().run_group(tasks, states)

    def rollout_client(self, state: vf.State) -> Client:
        """Every rollout's "model" is the recording, whatever the run's client."""
        return self.replayer

    async def replay(self, task: vf.Task, state: vf.State, context: Any = None) -> None:
        """The program: post each saved step's prompt; the recording answers."""
        key = (state.get("example_id"), self._indexes.pop(state["trajectory_id"], 0))
        record = self.records.get(key)
        if record is None:
            raise ReplayDivergedError(f"no saved rollout for example_id {key[0]!r}, rollout_index {key[1]} in {self.results}")
        difference = first_difference(record.get("prompt"), state["prompt"], "prompt")
        saved_tools = sorted(tool["name"] for tool in record.get("tool_defs") or [])
        tools = state.get("tool_defs") or []
        if difference is None and saved_tools != sorted(tool["name"] for tool in tools):
            difference = f"tool_defs (saved {saved_tools})"
        if difference is not None:
            raise ReplayDivergedError(f"example_id {key[0]!r}: the task changed since it was saved: {difference} differs")
        self.replayer.expect(state["trajectory_id"], record["trajectory"])
        try:
            client = state.get_client()
            payload = {"tools": [_tool_payload(tool) for tool in tools]} if tools else {}
            for step in record["trajectory"]:
                await client.chat.completions.create(model=state.get_model(), messages=step["prompt"], **payload)
        finally:
            self.replayer.forget(state["trajectory_id"])


__all__ = ["ReplayClient", "ReplayConfig", "ReplayDivergedError", "ReplayHarness", "load_records"]
