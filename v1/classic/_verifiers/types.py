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

__all__ = [
    "AssistantMessage",
    "ConfigData",
    "ConfigMap",
    "GroupHandler",
    "Handler",
    "MutableConfigMap",
    "State",
    "SystemMessage",
    "ToolMessage",
    "UserMessage",
]
