"""Model-free validation: each task's setup and its taskset's gold solution, scored as a rollout is.

`gold_env` makes a copy of an environment whose harness runs the taskset's `gold` program
instead of its own (`Harness.with_program`); `Env.generate` runs it as it runs an eval, with
`NoModelClient` as the only upstream, so a gold program that calls the model fails loudly
instead of reaching one. A task passes when its rollout has no error and its reward reaches
the taskset's `validate_threshold`; `verdict` says which stage failed and why.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from v1.clients import Client
from v1.config import ClientConfig
from v1.env._env import Env
from v1.env._results import ResultsWriter
from v1.errors import ConfigError, ModelRequestError
from v1.rollout import State, Task
from v1.types import GenerateMetadata, Messages, Response, SamplingArgs, Tool

STAGES = ("task", "setup", "gold", "scoring", "cleanup")
"""Where a validation fails: the row itself, the setup handlers, the gold program, the rewards, the cleanups."""
GOLD_MODEL = "gold"
"""The model name a gold run records (no model serves it)."""
VALIDATION_FIELD = "validation"
"""The field of each saved output holding its verdict: `{"passed", "stage", "reason"}`."""

_SETUP_PLACES = ("task", "tools", "setup:")
_SCORING_PLACES = ("reward:", "metric:", "advantage:", "model (after the program)")
_CLEANUP_PLACES = ("cleanup:", "sandbox:close", "tools:close", "finalize")


class NoModelClient(Client[None, Messages, Response, Tool]):
    """The upstream of a gold run: every call fails at once, and nothing is sent anywhere."""

    client_type = "no_model"

    def __init__(self) -> None:
        super().__init__(None)

    def setup_client(self, config: ClientConfig) -> None:
        return None

    def to_native_prompt(self, messages: Messages) -> tuple[Messages, dict[str, Any]]:
        return messages, {}

    def to_native_tool(self, tool: Tool) -> Tool:
        return tool

    async def get_native_response(
        self, prompt: Messages, model: str, sampling_args: SamplingArgs, tools: list[Tool] | None, **kwargs: Any
    ) -> Response:
        raise ModelRequestError(
            "a gold run has no model: the gold solution called the model (it must give the task's solution itself)",
            status_code=403,
        )

    def raise_from_native_response(self, response: Response) -> None:
        return None

    def from_native_response(self, response: Response) -> Response:
        return response


async def _setup_only(task: Task, state: State) -> None:
    """The program of `--only-setup`: nothing, so only the setup handlers (and cleanups) run."""


def gold_env(env: Env, *, only_setup: bool = False) -> Env:
    """A copy of `env` whose harness runs the taskset's gold program (or nothing, with `only_setup`, unscored).

    Raises:
        ConfigError: the taskset declares no gold solution (and `only_setup` is off).
    """
    program = _setup_only if only_setup else env.taskset.gold
    if program is None:
        raise ConfigError(
            f"{env.env_id}: the taskset declares no gold solution; give it one (Taskset(gold=...), or "
            '[env.taskset] gold = "module:fn"), or check the setups alone with --only-setup'
        )
    harness = env.harness.with_program(program)
    if only_setup:
        harness.score_rollouts = False
    copied = copy.copy(env)
    copied.harness = harness
    return copied


def validate_threshold(env: Env) -> float:
    """The reward a gold run must reach: the taskset's `validate_threshold`, else the sum of the rewards'
    positive weights (each reward is taken to give at most 1)."""
    configured = env.taskset.config.validate_threshold
    if configured is not None:
        return float(configured)
    return math.fsum(max(0.0, handler.weight) for handler in env.harness.handlers.of("reward"))


def stage_of(where: str) -> str:
    """The validation stage a recorded error's `where` belongs to."""
    if where.startswith(_SETUP_PLACES):
        return "setup"
    if where.startswith(_SCORING_PLACES):
        return "scoring"
    if where.startswith(_CLEANUP_PLACES):
        return "cleanup"
    return "gold"


def _scores(output: Mapping[str, Any]) -> str:
    metrics = output.get("metrics") or {}
    return ", ".join(f"{name}={value:g}" for name, value in sorted(metrics.items()) if isinstance(value, (int, float)))


def verdict(output: Mapping[str, Any], threshold: float, *, only_setup: bool = False) -> dict[str, Any]:
    """Whether one gold rollout passed: `{"passed", "stage", "reason"}` (stage and reason None when it did)."""
    error = output.get("error")
    if isinstance(error, Mapping):
        where = str(error.get("where") or "")
        stage = "setup" if only_setup and stage_of(where) == "gold" else stage_of(where)
        reason = f"{where}: {error.get('type')}: {error.get('message')}"
        return {"passed": False, "stage": stage, "reason": reason}
    if only_setup:
        return {"passed": True, "stage": None, "reason": None}
    reward = output.get("reward")
    if not isinstance(reward, (int, float)) or reward < threshold - 1e-9:
        scores = _scores(output)
        reason = f"reward {reward} is below the threshold {threshold:g}" + (f" ({scores})" if scores else "")
        return {"passed": False, "stage": "scoring", "reason": reason}
    return {"passed": True, "stage": None, "reason": None}


class ValidationWriter(ResultsWriter):
    """A run folder whose outputs each carry their verdict (`field`): `{"passed", "stage", "reason"}`.

    Args:
        path, extra_metadata: as `ResultsWriter`'s.
        threshold: the reward a gold run must reach.
        only_setup: the run checks setups alone (no gold, no scoring).
    """

    field = VALIDATION_FIELD

    def __init__(self, path: Any, extra_metadata: Mapping[str, Any] | None = None, *, threshold: float, only_setup: bool) -> None:
        super().__init__(path, extra_metadata, redo=lambda output: not self.verdict(output)["passed"])
        self.threshold = threshold
        self.only_setup = only_setup

    def verdict(self, output: Mapping[str, Any]) -> dict[str, Any]:
        """Whether one gold rollout passed, and if not the stage that failed and why (see `verdict`)."""
        return verdict(output, self.threshold, only_setup=self.only_setup)

    async def write(self, outputs: Sequence[Mapping[str, Any]]) -> None:
        for output in outputs:
            output[VALIDATION_FIELD] = self.verdict(output)  # type: ignore[index]
        await super().write(outputs)


async def run_gold(env: Env, rows: list[dict[str, Any]], writer: ValidationWriter, max_concurrent: int) -> GenerateMetadata:
    """Run `rows` through a `gold_env` as an eval runs them, `NoModelClient` the only upstream; the run's metadata.

    The env's teardown runs at the end. Tasks `writer` already holds as passed (a resumed run) are kept.
    """
    env.pass_threshold = writer.threshold
    try:
        result = await env.generate(
            rows,
            NoModelClient(),
            GOLD_MODEL,
            rollouts_per_example=1,
            max_concurrent=max_concurrent,
            results=writer,
            keep_outputs=False,
        )
    finally:
        await env.teardown()
    return result["metadata"]


__all__ = [
    "GOLD_MODEL",
    "NoModelClient",
    "STAGES",
    "VALIDATION_FIELD",
    "ValidationWriter",
    "gold_env",
    "run_gold",
    "stage_of",
    "validate_threshold",
    "verdict",
]
