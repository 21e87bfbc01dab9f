"""`RolloutContext`: what the harness lends a program for one rollout.

It lives apart from the `Harness` that builds it, so a program depends on exactly what it is
given: the task and state, the `@stop` checks, tool execution, the user simulator, the turn and
time limits, and the artifacts the harness's taskset and toolsets declare; never the harness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from v1.config import ArtifactConfig
from v1.rollout._lifecycle import Handlers, rollout_arguments
from v1.rollout._state import State
from v1.rollout._task import Task


class UserSimulator(Protocol):
    """The simulated user a program talks to (`v1.taskset.User`)."""

    async def get_response(self, task: Task, state: State, messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None: ...


@dataclass(eq=False, kw_only=True)
class RolloutContext:
    """What the harness lends a program for one rollout: stop checks, tool execution, the user, limits.

    Args:
        task: the rollout's task.
        state: the rollout's state.
        handlers: the harness's handlers; `check_stops` runs their `@stop` ones.
        user: the user simulator, if the harness has one.
        default_max_turns: the harness's turn limit (a task's `max_turns` wins: `state.get_max_turns`).
        timeout_seconds: the harness's time limit for the program, if any.
        artifacts: the files the harness's taskset and toolsets declare (a program adds its own).
    """

    task: Task
    state: State
    handlers: Handlers
    user: UserSimulator | None = None
    default_max_turns: int = 10
    timeout_seconds: float | None = None
    artifacts: list[ArtifactConfig] = field(default_factory=list)

    async def check_stops(self, state: State) -> bool:
        """Run the `@stop` handlers; the first that fires stops the rollout. True when stopped."""
        if not self.handlers.of("stop", group=False):  # most harnesses have none: no coroutine to make and run
            return bool(state["is_completed"])
        condition = await self.first_stop(state)
        if condition is not None:
            state.stop(condition)
        return bool(state["is_completed"])

    async def first_stop(self, state: State) -> str | None:
        """The stop condition that holds now (the one already recorded, else the first `@stop` that fires), or None."""
        if state["is_completed"]:
            return state["stop_condition"]
        stops = self.handlers.of("stop", group=False)
        arguments = rollout_arguments(self.task, state) if stops else {}
        for handler in stops:
            if await handler.call(arguments):
                return handler.name
        return None

    async def call_tool(self, name: str, arguments: str) -> Any:
        """Tool-message content for one tool call (errors come back as readable messages).

        Raises:
            RolloutStopped: the tool raised one of its toolset's `stop_errors`.
        """
        toolbox = self.state.runtime.toolbox
        if toolbox is None:
            return f"Error: unknown tool {name!r}; available tools: none"
        return await toolbox.call(name, arguments)

    async def user_response(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The user simulator's reply, or None when there is no user."""
        if self.user is None:
            return None
        return await self.user.get_response(self.task, self.state, messages)


__all__ = ["RolloutContext", "UserSimulator"]
