"""``verifiers``, as code written for it sees it, served by v1 (see `v1.classic.install_verifiers_alias`).

Every public name of `v1` is here, plus the names verifiers' published environments use that v1
spells elsewhere: `get_messages`, `ConfigData`, `ConfigMap`, `Handler`, ...; `load_example_dataset` is
verifiers' (see `v1.classic._verifiers.utils.data_utils`).
"""

from __future__ import annotations

from typing import Any

import v1
from v1 import *  # noqa: F403
from v1.classic._verifiers.types import ConfigData, ConfigMap, GroupHandler, Handler, MutableConfigMap
from v1.classic._verifiers.types import State as State  # type: ignore[assignment]  # verifiers.State is the classic one
from v1.classic._verifiers.utils.data_utils import load_example_dataset as load_example_dataset
from v1.classic._verifiers.utils.message_utils import get_messages

__all__ = [
    *v1.__all__,
    "ConfigData",
    "ConfigMap",
    "GroupHandler",
    "Handler",
    "MutableConfigMap",
    "get_messages",
]


def __getattr__(name: str) -> Any:
    """Names v1 exports lazily or under `v1.classic` reach ``verifiers`` code too; any other is the alias's gap.

    Raises:
        AttributeError: v1 has no such name (``verifiers.RLMConfig``, ``verifiers.GymEnv``, ...).
    """
    try:
        return getattr(v1, name)
    except AttributeError:
        raise AttributeError(f"verifiers.{name}: v1's verifiers alias does not provide this name") from None
