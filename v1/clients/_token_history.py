"""The recorded token ids of a conversation's earlier turns, found in a rollout's trajectory.

The exact-token clients (`renderer`, `nemorl_chat_completions`) make each turn's
prompt ids extend the previous turn's prompt + completion ids. For that they find,
among the trajectory steps, the one whose prompt and completion messages begin the
new prompt; messages are compared by what a chat template renders from them (role,
text, tool calls with parsed arguments, tool call id), so ``content: ""`` and
``content: None``, or re-serialised tool arguments, do not break the match.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from v1._util import bounded_json as _bounded_json

RECENT_STEPS = 16


def message_key(message: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a chat template sees of a message, comparable across serialisations."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    calls = []
    for call in message.get("tool_calls") or ():
        function = (call.get("function") or {}) if isinstance(call, Mapping) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = _bounded_json.loads(arguments)
            except ValueError:
                pass
        calls.append((function.get("name"), json.dumps(arguments, sort_keys=True)))
    return (
        message.get("role"),
        content or None,
        tuple(calls),
        message.get("tool_call_id"),
        message.get("reasoning_content") or None,
    )


def same_messages(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two message lists render the same."""
    return len(first) == len(second) and all(message_key(a) == message_key(b) for a, b in zip(first, second))


def step_token_ids(step: Mapping[str, Any]) -> tuple[list[int], list[int], list[float]] | None:
    """A trajectory step's prompt ids, completion ids and completion logprobs, when it recorded them."""
    tokens = step.get("tokens")
    if not isinstance(tokens, Mapping) or not tokens.get("prompt_ids") or tokens.get("completion_ids") is None:
        return None
    return list(tokens["prompt_ids"]), list(tokens["completion_ids"]), list(tokens.get("completion_logprobs") or [])


def previous_turn(trajectory: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The latest recent step with token ids whose prompt + completion messages begin `messages` (and are fewer)."""
    for step in reversed(list(trajectory)[-RECENT_STEPS:]):
        if step_token_ids(step) is None:
            continue
        earlier = [*(step.get("prompt") or ()), *(step.get("completion") or ())]
        if 0 < len(earlier) < len(messages) and same_messages(messages[: len(earlier)], earlier):
            return step
    return None


def step_for_assistant_message(
    trajectory: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]], index: int
) -> Mapping[str, Any] | None:
    """The recent step with token ids that produced ``messages[index]`` (an assistant turn) from ``messages[:index]``."""
    for step in reversed(list(trajectory)[-RECENT_STEPS:]):
        if step_token_ids(step) is None:
            continue
        prompt, completion = list(step.get("prompt") or ()), list(step.get("completion") or ())
        if len(prompt) == index and completion and same_messages(completion[:1], messages[index : index + 1]):
            if same_messages(prompt, messages[:index]):
                return step
    return None


def trajectory_of(state: Any) -> list[Mapping[str, Any]]:
    """The state's trajectory steps (empty without a state)."""
    if state is None:
        return []
    trajectory = state.get("trajectory") if hasattr(state, "get") else None
    return list(trajectory or [])


__all__ = ["message_key", "previous_turn", "same_messages", "step_for_assistant_message", "step_token_ids", "trajectory_of"]
