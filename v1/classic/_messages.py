"""Message classes of the classic API: `SystemMessage`, `UserMessage`, `AssistantMessage`, `ToolMessage`.

Each is a `dict` (``{"role": ..., "content": ...}``), so messages stay plain OpenAI chat
dicts on the wire and in saved results; the classes add the seed's constructor, attribute
access (``message.content``) and `SystemMessage.from_path`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from v1.errors import ConfigError

MessageContent = str | list[dict[str, Any]]
"""A message's content: text, or a list of content parts (``{"type": "text", "text": ...}``, images)."""


class _Message(dict):  # type: ignore[type-arg]
    """A chat message of one fixed role, as a plain dict."""

    ROLE: ClassVar[str]
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def __init__(self, content: MessageContent | None = "", **fields: Any) -> None:
        role = fields.pop("role", self.ROLE)
        if role != self.ROLE:
            raise ValueError(f"{type(self).__name__}: role must be {self.ROLE!r}, got {role!r}")
        if content is not None and not isinstance(content, (str, list)):
            raise TypeError(f"{type(self).__name__}: content must be a string or a list of parts, got {type(content).__name__}")
        missing = [name for name in self.REQUIRED if fields.get(name) is None]
        if missing:
            raise ValueError(f"{type(self).__name__}: missing field {missing[0]!r}")
        super().__init__(role=self.ROLE, content=content, **fields)

    @property
    def role(self) -> str:
        return str(self["role"])

    @property
    def content(self) -> MessageContent | None:
        value: MessageContent | None = self.get("content")
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


class SystemMessage(_Message):
    """A system message: ``SystemMessage(content="You are terse.")`` or `SystemMessage.from_path`."""

    ROLE = "system"

    @classmethod
    def from_path(cls, path: str | Path) -> SystemMessage:
        """A system message holding the UTF-8 text file at `path`, verbatim (line endings and whitespace kept).

        Raises:
            ConfigError: the file is missing, unreadable or not UTF-8 text.
        """
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"SystemMessage.from_path: cannot read {str(path)!r} as UTF-8 text ({exc})") from None
        return cls(content=text)


class UserMessage(_Message):
    """A user message."""

    ROLE = "user"


class AssistantMessage(_Message):
    """An assistant message; `tool_calls` (OpenAI format) when the model called tools."""

    ROLE = "assistant"

    @property
    def tool_calls(self) -> list[ToolCallView] | None:
        value: list[dict[str, Any]] | None = self.get("tool_calls")
        return None if value is None else [ToolCallView(call) for call in value]


class ToolCallView(dict):  # type: ignore[type-arg]
    """One OpenAI-format tool call with the seed's attribute access: `.id`, `.name`, `.arguments`."""

    @property
    def id(self) -> str:
        return str(self.get("id", ""))

    @property
    def name(self) -> str:
        return str((self.get("function") or {}).get("name", ""))

    @property
    def arguments(self) -> str:
        return str((self.get("function") or {}).get("arguments", ""))


class ToolMessage(_Message):
    """A tool's result, answering the tool call `tool_call_id`."""

    ROLE = "tool"
    REQUIRED = ("tool_call_id",)

    @property
    def tool_call_id(self) -> str:
        return str(self["tool_call_id"])


_BY_ROLE: dict[str, type[_Message]] = {}


def typed_messages(messages: Any) -> Any:
    """Chat messages as the message classes (still dicts, now with `.role`, `.content`, `.tool_calls`); other values as given."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and m.get("role") in _BY_ROLE for m in messages):
        return messages
    return [
        m if isinstance(m, _Message) else _BY_ROLE[m["role"]](**{k: v for k, v in m.items() if k != "role"}) for m in messages
    ]


_BY_ROLE.update({"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage, "tool": ToolMessage})

__all__ = ["AssistantMessage", "MessageContent", "SystemMessage", "ToolCallView", "ToolMessage", "UserMessage", "typed_messages"]
