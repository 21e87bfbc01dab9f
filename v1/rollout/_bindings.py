"""Bindings: hidden tool (and user) arguments filled from the task, the state, objects or other tools.

A binding's source is a path (`task.*`, `state.*`, `objects.*`, `tools.*`) or a callable
taking `task` and/or `state`; paths are checked when the owner is built, and resolved per
call against a `BindingContext`. Values from the state are copies unless the owner allows writes.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from v1._util.calling import call_user_code
from v1.errors import ConfigError, ToolError
from v1.rollout._state import State
from v1.rollout._task import Task


class ObjectScope(Protocol):
    """Where `objects.*` bindings come from: a tool scope (`v1.tools.Scope`)."""

    async def get_object(self, name: str) -> Any: ...


BINDING_ROOTS = ("task", "state", "objects", "tools")


@dataclass
class BindingContext:
    """What a binding resolves against in one rollout; `tools` are the rollout's tools, called with the model's arguments."""

    task: Task | None
    state: State | None
    scope: ObjectScope | None
    tools: Mapping[str, Callable[..., Awaitable[Any]]] = field(default_factory=dict)


class Binding:
    """One hidden argument: ``"tool.argument"`` (or ``"argument"`` for a user) bound to a source.

    A string source is a framework path (`task.*`, `state.*`, `objects.*`, `tools.*`);
    a callable source is called with `task` and/or `state` when it asks for them.
    """

    def __init__(self, name: str, source: Any, *, write: bool = False) -> None:
        self.name = name
        self.source = source
        self.write = write
        self.path: list[str] = []
        if isinstance(source, str):
            self.path = source.split(".")
            if self.path[0] not in BINDING_ROOTS or not all(self.path):
                raise ConfigError(
                    f"binding {name!r}: {source!r} is not a binding path; paths start with one of "
                    f"{', '.join(r + '.' for r in BINDING_ROOTS)} (bind literal values with a callable)"
                )
            if self.path[0] in ("objects", "tools") and len(self.path) < 2:
                raise ConfigError(f"binding {name!r}: {source!r} must name one of the {self.path[0]}, e.g. '{self.path[0]}.x'")
            if self.path == ["state"] and not write:
                raise ConfigError(f"binding {name!r}: binding the whole state needs write=True on its owner")
        elif callable(source):
            params = inspect.signature(source).parameters
            unknown = [p for p, v in params.items() if p not in ("task", "state") and v.default is v.empty]
            if unknown:
                raise ConfigError(f"binding {name!r}: a callable source may only take 'task' and 'state', not {unknown}")
        else:
            raise ConfigError(f"binding {name!r}: expected a path string or a callable, got {type(source).__name__}")

    def check(self, objects: Iterable[str], tools: Iterable[str] | None) -> None:
        """Fail at construction when an `objects.*`/`tools.*` path names nothing."""
        if not self.path:
            return
        root, target = self.path[0], self.path[1] if len(self.path) > 1 else None
        if root == "objects" and target not in set(objects):
            raise ConfigError(f"binding {self.name!r}: {self.source!r} does not resolve; objects: {sorted(objects) or 'none'}")
        if root == "tools" and tools is not None and target not in set(tools):
            raise ConfigError(f"binding {self.name!r}: {self.source!r} does not resolve; tools: {sorted(tools) or 'none'}")

    async def resolve(self, context: BindingContext) -> Any:
        if not self.path:
            params = inspect.signature(self.source).parameters
            kwargs = {name: getattr(context, name) for name in ("task", "state") if name in params}
            return await call_user_code(self.source, **kwargs)
        root, rest = self.path[0], self.path[1:]
        if root == "objects":
            if context.scope is None:
                raise ToolError(f"binding {self.name!r}: objects are only available inside a rollout")
            value = await context.scope.get_object(rest[0])
            return self._walk(value, rest[1:])
        if root == "tools":
            if rest[0] not in context.tools:
                raise ToolError(f"binding {self.name!r}: tool {rest[0]!r} is not available in this rollout")
            return context.tools[rest[0]]
        value = getattr(context, root)
        if value is None:
            raise ToolError(f"binding {self.name!r}: {root} is only available inside a rollout")
        value = self._walk(value, rest)
        return value if self.write or root == "task" else copy.deepcopy(value)

    def _walk(self, value: Any, rest: list[str]) -> Any:
        for depth, part in enumerate(rest):
            try:
                if isinstance(value, Mapping):
                    value = value[part]
                elif isinstance(value, list):
                    value = value[int(part)]
                else:
                    value = getattr(value, part)
            except (KeyError, IndexError, ValueError, AttributeError):
                walked = ".".join(self.path[: len(self.path) - len(rest) + depth + 1])
                raise ToolError(f"binding {self.name!r}: {self.source!r} does not resolve (nothing at {walked!r})") from None
        return value


__all__ = ["BINDING_ROOTS", "Binding", "BindingContext"]
