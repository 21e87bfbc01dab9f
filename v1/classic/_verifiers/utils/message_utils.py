"""``verifiers.utils.message_utils``: typed views of a transcript."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from v1.classic._messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage

_BY_ROLE = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage, "tool": ToolMessage}


def normalize_messages(messages: Sequence[Mapping[str, Any]] | str) -> list[Any]:
    """The messages as v1's message classes (attribute access: ``message.content``); a string is one user message."""
    if isinstance(messages, str):
        return [UserMessage(messages)]
    return [_BY_ROLE[str(m["role"])](**{k: v for k, v in m.items() if k != "role"}) for m in messages]


def message_role(message: Mapping[str, Any]) -> str:
    """The role of one message."""
    return str(message["role"])


def get_messages(messages: Sequence[Mapping[str, Any]] | str, role: str | None = None) -> list[Any]:
    """The transcript's messages as typed messages, only those of `role` when given (``"text"``: user and assistant)."""
    typed = normalize_messages(messages)
    if role is None:
        return typed
    roles = {"user", "assistant"} if role == "text" else {role}
    return [m for m in typed if m.role in roles]
