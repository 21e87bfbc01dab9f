"""`EnvState`: the state of an `Env`'s rollout, with the reference's reads of its handles.

`state["client"]`, `state["sampling_args"]`, `state["model"]`, `state["input"]`, `state["timing"]`
and `state["tool_defs"]` read through to the rollout's handles and task (never stored, so
`json.dumps(state)` is unchanged), as the seed's `State` fields "set during initialization".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from v1.interception import upstream
from v1.rollout import State
from v1.types import Tool

_MISSING = object()


def _tool_defs_of(info: Any) -> list[Tool] | None:
    """A row's ``info["tool_defs"]`` as `Tool` objects (the reference's normalization), or None without any."""
    defs = info.get("tool_defs") if isinstance(info, Mapping) else None
    if not defs:
        return None
    return [definition if isinstance(definition, Tool) else Tool.model_validate(dict(definition)) for definition in defs]


class EnvState(State):
    """The core `State` of an `Env`'s rollout, plus reads of the seed's initialization fields."""

    def _seed_field(self, key: Any) -> Any:
        if key == "input":
            return self.task
        if key == "model":
            return self.runtime.model
        if key == "client":
            return upstream(self).client
        if key == "sampling_args":
            return upstream(self).sampling_args
        if key == "timing":
            return self.runtime.typed_timing()  # the live record (the core saves its JSON when the rollout ends)
        if key == "tool_defs":
            return _tool_defs_of(self.task.get("info"))  # until the harness resolves the rollout's tools
        raise KeyError(key)

    def __getitem__(self, key: Any) -> Any:
        value = dict.get(self, key, _MISSING)  # a stored field, as nearly every read is: no frames below
        if value is not _MISSING:
            return value
        try:
            return super().__getitem__(key)
        except KeyError:
            return self._seed_field(key)

    def get(self, key: Any, default: Any = None) -> Any:
        """`state[key]` (seed fields included), or `default`."""
        value = dict.get(self, key, _MISSING)
        if value is not _MISSING:
            return value
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or self.get(key, _MISSING) is not _MISSING


__all__ = ["EnvState"]
