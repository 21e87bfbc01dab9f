"""The text of chat messages: what parsers, rubrics and the judge read out of a completion."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from v1.types import Messages


def message_text(message: Mapping[str, Any]) -> str:
    """The text of one chat message (the text parts of a content list, joined)."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return content if isinstance(content, str) else ""


def last_assistant_text(completion: Messages | None) -> str | None:
    """The text of the last assistant message of `completion` (a string is returned as is; None when there is none)."""
    if completion is None or isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return message_text(message)
    return None
