"""``verifiers.v1``: v1 itself, with the config aliases verifiers' v1 environments import from it."""

from __future__ import annotations

from typing import Any

import v1
from v1 import *  # noqa: F403
from v1.classic._verifiers.types import ConfigData, ConfigMap, GroupHandler, Handler, MutableConfigMap

__all__ = [*v1.__all__, "ConfigData", "ConfigMap", "GroupHandler", "Handler", "MutableConfigMap"]


def __getattr__(name: str) -> Any:
    return getattr(v1, name)
