"""Scopes: the live resources of a toolset or user, kept per rollout, per group, or once for all.

An owner (`ScopedOwner`) has object factories and MCP servers; each scope key gets one
`Scope` holding the objects built lazily (once) and the MCP connections started, closed
exactly once when the scope ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from v1._util.calling import call_user_code
from v1.config import ToolScope, resolve_callable
from v1.errors import ToolError
from v1.tools._mcp import MCPConnection, MCPTool
from v1.tools._tool_function import ToolFunction


def scope_key(scope: ToolScope, rollout_id: str, group_id: str) -> str:
    """The key a scope's resources are kept under: one per rollout, per group, or one in all."""
    if scope == "rollout":
        return f"rollout:{rollout_id}"
    if scope == "group":
        return f"group:{group_id}"
    return "global"


class Scope:
    """One scope's live resources of an owner: objects (built lazily, once) and MCP connections."""

    def __init__(self, owner: ScopedOwner, key: str) -> None:
        self.owner = owner
        self.key = key
        self.objects: dict[str, Any] = {}
        self._object_locks: dict[str, asyncio.Lock] = {}
        self._order: list[str] = []
        self.connections: list[tuple[MCPTool, MCPConnection]] = []
        self._mcp_lock = asyncio.Lock()
        self._mcp_started = False
        self.dynamic: dict[str, ToolFunction] = {}
        self.closed = False

    async def get_object(self, name: str) -> Any:
        """The object `name`, built on first use in this scope."""
        if self.closed:
            raise ToolError(f"object {name!r}: its scope {self.key!r} has ended")
        if name in self.objects:
            return self.objects[name]
        factory = self.owner.object_factories.get(name)
        if factory is None:
            raise ToolError(f"no object named {name!r}; objects: {sorted(self.owner.object_factories) or 'none'}")
        lock = self._object_locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.objects:
                self.objects[name] = await call_user_code(factory)
                self._order.append(name)
        return self.objects[name]

    async def start_mcp(self, sources: list[MCPTool]) -> None:
        """Start this scope's MCP servers (once, concurrently)."""
        async with self._mcp_lock:
            if self._mcp_started:
                if len(self.connections) < len(sources):
                    raise ToolError(f"an MCP server of {self.owner.describe()} failed to start earlier in scope {self.key!r}")
                return
            self._mcp_started = True
            connections = [source.connect() for source in sources]
            results = await asyncio.gather(*(c.start() for c in connections), return_exceptions=True)
            for source, connection, result in zip(sources, connections, results):
                if not isinstance(result, BaseException):
                    self.connections.append((source, connection))
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                raise failures[0]

    async def aclose(self) -> list[BaseException]:
        """Close objects (newest first) and stop MCP servers, each exactly once; returns what failed."""
        if self.closed:
            return []
        self.closed = True
        errors: list[BaseException] = []
        for name in reversed(self._order):
            value = self.objects.pop(name)
            closer = getattr(value, "aclose", None) or getattr(value, "close", None)
            if callable(closer):
                try:
                    await call_user_code(closer)
                except Exception as exc:
                    errors.append(exc)
        await asyncio.gather(*(connection.aclose() for _, connection in self.connections))
        self.connections.clear()
        return errors


class ScopedOwner:
    """Owns object factories and keeps one `Scope` per scope key (shared by toolsets and users)."""

    scope: ToolScope
    object_factories: dict[str, Callable[..., Any]]

    def __init__(self) -> None:
        self._scopes: dict[str, Scope] = {}

    def describe(self) -> str:
        return type(self).__name__

    def scope_key(self, rollout_id: str, group_id: str) -> str:
        return scope_key(self.scope, rollout_id, group_id)

    def open_scope(self, key: str) -> Scope:
        """The live scope for `key`, created on first use."""
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = Scope(self, key)
        return scope

    async def close_scope(self, key: str) -> list[BaseException]:
        """End a scope: its objects are closed and its servers stopped. Idempotent."""
        scope = self._scopes.pop(key, None)
        return await scope.aclose() if scope is not None else []

    async def aclose(self) -> list[BaseException]:
        """End every open scope (global ones included)."""
        errors: list[BaseException] = []
        for key in list(self._scopes):
            errors += await self.close_scope(key)
        return errors

    @property
    def open_scopes(self) -> list[str]:
        return list(self._scopes)


def build_object_factories(objects: Mapping[str, Any], where: str) -> dict[str, Callable[..., Any]]:
    return {name: resolve_callable(factory, f"{where}.objects.{name}") for name, factory in objects.items()}


__all__ = ["Scope", "ScopedOwner", "build_object_factories", "scope_key"]
