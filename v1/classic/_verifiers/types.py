"""``verifiers.types``: the message, state and record types, plus the config aliases environments annotate with."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, TypeAlias

from v1.classic._classic_state import State
from v1.classic._messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from v1.classic._types import *  # noqa: F403
from v1.types import *  # noqa: F403

Handler: TypeAlias = Callable[..., object]
GroupHandler: TypeAlias = Callable[..., Sequence[float] | Any]
ConfigMap: TypeAlias = Mapping[str, object]
ConfigData: TypeAlias = dict[str, object]
MutableConfigMap: TypeAlias = MutableMapping[str, object]
ProgramOptionMap: TypeAlias = Mapping[str, object]
"""A program's options (`args`, `env`, `files`, ...), as verifiers' v1 environments annotate them."""
MessageContent: TypeAlias = str | list[dict[str, Any]]
"""A message's content: a text, or a list of content parts (plain dicts here, as every message is)."""

__all__ = [
    "AssistantMessage",
    "ConfigData",
    "ConfigMap",
    "GroupHandler",
    "Handler",
    "MessageContent",
    "MutableConfigMap",
    "ProgramOptionMap",
    "State",
    "SystemMessage",
    "ToolMessage",
    "UserMessage",
]
