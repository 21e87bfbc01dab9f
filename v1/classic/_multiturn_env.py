"""`MultiTurnEnv` and `SingleTurnEnv`: the classic rollout loop as a v1 harness program.

Each turn: the stop conditions (the built-in ones below, then the environment's own
`@vf.stop` methods), the prompt (`get_prompt_messages`: the last step's prompt and completion
followed by `env_response`), one model call through the rollout's interception endpoint
(`get_model_response`, recorded as a trajectory step), then `add_trajectory_step`. The
endpoint enforces the same turn limit, token budgets and stops for its part, so a classic
environment's rollout is a v1 rollout: trajectory, tokens, retries, results, trainer.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from v1._util.calling import call_user_code
from v1.classic._environment import Environment
from v1.errors import ConfigError, ProgramError
from v1.rollout import RolloutContext, State, Task, stop, thaw
from v1.types import Messages, SamplingArgs, TimeSpan, TrajectoryStep

_UNSET = object()

UNLIMITED_TURNS = 2**31 - 1
"""The harness's turn limit for `max_turns=-1` (no limit of the environment's own)."""


def _check_messages(value: Any, where: str) -> list[dict[str, Any]]:
    """`env_response`'s answer as a list of chat messages (a string is one user message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(message, Mapping) and isinstance(message.get("role"), str) for message in value
    ):
        raise ProgramError(f"{where} returned {type(value).__name__} {value!r:.80}; expected a list of messages with a 'role'")
    return [dict(message) for message in value]


def _text(messages: Any) -> str:
    """The text of a prompt or completion (a string as is, message contents joined)."""
    if isinstance(messages, str):
        return messages
    parts = []
    for message in messages or []:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        parts.append(content or "")
    return "".join(parts)


class MultiTurnEnv(Environment, ABC):
    """Multi-turn interactions: the model answers, `env_response` replies, until a stop condition.

    Args:
        max_turns: the most model calls per rollout (-1: no limit of its own).
        timeout_seconds: the rollout's wall-clock limit (stop condition `timeout_reached`).
        **kwargs: the `Environment` arguments (dataset, rubric, system_prompt, ...).
    """

    def __init__(self, max_turns: int = -1, timeout_seconds: float | None = None, **kwargs: Any) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or (max_turns < 1 and max_turns != -1):
            raise ConfigError(f"{type(self).__name__}: max_turns must be a positive integer or -1 (no limit), got {max_turns!r}")
        if timeout_seconds is not None and (isinstance(timeout_seconds, bool) or not timeout_seconds > 0):
            raise ConfigError(f"{type(self).__name__}: timeout_seconds must be positive, got {timeout_seconds!r}")
        self.max_turns = max_turns
        self.timeout_seconds = timeout_seconds
        self.max_total_completion_tokens: int | None = None
        super().__init__(**kwargs)

    def harness_options(self) -> dict[str, Any]:
        return {
            "max_turns": self.max_turns if self.max_turns > 0 else UNLIMITED_TURNS,
            "timeout_seconds": self.timeout_seconds,
        }

    @abstractmethod
    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        """The environment's reply to the model's last turn (messages to append)."""

    # -- hooks ----------------------------------------------------------------------------------

    async def setup_state(self, state: State) -> State:
        """Prepare a rollout's state before its first turn (override to add fields)."""
        return state

    async def get_prompt_messages(self, state: State) -> Messages:
        """The next turn's prompt: the rollout's prompt first, then the last step's prompt and
        completion followed by `env_response` (which may set `state["final_env_response"]`)."""
        trajectory = state["trajectory"]
        if not trajectory:
            return thaw(state["prompt"])
        last = trajectory[-1]
        if self.message_type == "completion":
            history: Any = _text(last["prompt"]) + _text(last["completion"])
        else:
            history = [*thaw(last["prompt"]), *thaw(last["completion"])]
        started = time.time()
        answer: Any = self.env_response(history, state)
        if inspect.isawaitable(answer):  # a plain `def env_response` (seed 004) answers directly
            answer = await answer
        state.runtime.timing.env.spans.append(TimeSpan(start=started, end=time.time()))
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], Mapping):
            answer = answer[0]  # the older form (seed 004): (messages, state)
        reply = _check_messages(answer, f"{type(self).__name__}.env_response")
        if state.get("final_env_response") is not None:
            return history
        return history + _text(reply) if isinstance(history, str) else [*history, *reply]

    async def render_completion(self, state: State) -> Messages:
        """The rollout's completion: what followed the prompt in the last step, plus a final env response."""
        trajectory = state["trajectory"]
        final = state.get("final_env_response")
        if not trajectory:
            return "" if self.message_type == "completion" else []
        last = trajectory[-1]
        if self.message_type == "completion":
            prompt_text = _text(state["prompt"])
            text = _text(last["prompt"]) + _text(last["completion"])
            return text[len(prompt_text) :] if text.startswith(prompt_text) else _text(last["completion"])
        context = [*thaw(last["prompt"]), *thaw(last["completion"])]
        prompt = thaw(state["prompt"])
        completion = context[len(prompt) :] if context[: len(prompt)] == prompt else thaw(last["completion"])
        return [*completion, *(thaw(final) if final else [])]

    async def add_trajectory_step(self, state: State, step: TrajectoryStep) -> None:
        """Called with each step the endpoint recorded (override to annotate `step["extras"]`)."""

    def set_max_total_completion_tokens(self, max_total_completion_tokens: int | None) -> None:
        """The most completion tokens a rollout may generate over all its turns (None: no limit)."""
        if max_total_completion_tokens is not None and (
            isinstance(max_total_completion_tokens, bool)
            or not isinstance(max_total_completion_tokens, int)
            or max_total_completion_tokens < 1
        ):
            raise ConfigError(
                f"set_max_total_completion_tokens: expected a positive integer, got {max_total_completion_tokens!r}"
            )
        self.max_total_completion_tokens = max_total_completion_tokens
        self.harness.config.max_total_completion_tokens = max_total_completion_tokens

    # -- built-in stop conditions -----------------------------------------------------------

    @stop(priority=100)
    async def has_error(self, state: State) -> bool:
        return state["error"] is not None

    @stop(priority=90)
    async def prompt_too_long(self, state: State) -> bool:
        return state["stop_condition"] == "prompt_too_long"

    @stop(priority=80)
    async def max_turns_reached(self, state: State) -> bool:
        return self.max_turns > 0 and len(state["trajectory"]) >= self.max_turns

    @stop(priority=70)
    async def timeout_reached(self, state: State) -> bool:
        started = state.runtime.timing.start_time
        return self.timeout_seconds is not None and time.time() - started >= self.timeout_seconds

    @stop(priority=60)
    async def max_total_completion_tokens_reached(self, state: State) -> bool:
        limit = self.max_total_completion_tokens
        if not limit:
            return False
        used = sum(((step.get("response") or {}).get("usage") or {}).get("completion_tokens", 0) for step in state["trajectory"])
        return used >= limit

    @stop(priority=50)
    async def has_final_env_response(self, state: State) -> bool:
        return state.get("final_env_response") is not None

    # -- the loop -------------------------------------------------------------------------------

    async def stopped(self, state: State) -> bool:
        """Run the stop conditions (highest priority first) through the core's stop check; the first that fires stops the rollout."""
        return await RolloutContext(task=state.task, state=state, handlers=self.harness.handlers).check_stops(state)

    def tool_definitions(self, state: State) -> list[dict[str, Any]] | None:
        """The tools offered to the model each turn (none here; `ToolEnv` offers its tools)."""
        return None

    async def rollout(
        self,
        input: Mapping[str, Any] | Task | None = None,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        **older: Any,
    ) -> Any:
        """Run one rollout of `input` through the harness and score it alone (`Environment.rollout`)."""
        return await super().rollout(input, client, model, sampling_args, **older)

    async def rollout_program(self, task: Task, state: State) -> None:
        if self.message_type == "completion":
            state["prompt"] = _text(state["prompt"])
        prepared = await call_user_code(self.setup_state, state)
        if isinstance(prepared, dict) and prepared is not state:  # a setup_state that returns a new state
            for key, value in dict.items(prepared):
                if dict.get(state, key, _UNSET) is not value:
                    state[key] = value
        while not await self.stopped(state):
            prompt = await self.get_prompt_messages(state)
            if state.get("final_env_response") is not None:
                continue
            response = await self.get_model_response(state, prompt, self.tool_definitions(state))
            if response is None:
                break
            await self.add_trajectory_step(state, state["trajectory"][-1])
        state["completion"] = await self.render_completion(state)


class SingleTurnEnv(MultiTurnEnv):
    """One model answer per prompt (`max_turns=1`): question-and-answer tasks.

    Args:
        **kwargs: the `Environment` arguments (dataset, rubric, system_prompt, ...).
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs["max_turns"] = 1
        super().__init__(**kwargs)

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        return []


__all__ = ["MultiTurnEnv", "SingleTurnEnv", "UNLIMITED_TURNS"]
