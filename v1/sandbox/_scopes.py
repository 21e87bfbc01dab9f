"""Which sandbox a rollout gets: one per rollout, per group or per harness (`SandboxConfig.scope`).

`SandboxScopes` (one per harness) creates each shared sandbox once: the first
rollout to ask starts the creation and the others await the same future, so
rollouts of a group never queue behind a lock while they use it (every command
is its own process). `RolloutSandboxes` is one rollout's view: `get("program")`
is the program's sandbox, `get(config)` a toolset's or user's own. Sandboxes
are created lazily and deleted when their scope ends, after scoring and
cleanups, so tests that score the work still find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from v1.config import SandboxConfig
from v1.errors import ConfigError
from v1.sandbox._backend import EndpointTarget, Sandbox
from v1.sandbox._manager import get_manager

logger = logging.getLogger(__name__)


@dataclass
class _Shared:
    future: asyncio.Future[Sandbox]
    lifetime: asyncio.TimerHandle | None = None


@dataclass
class SandboxScopes:
    """The sandboxes of one harness, keyed by scope key, then config.

    Keyed by scope first, so ending one rollout's scope touches its own sandboxes only, however
    many other rollouts hold theirs (thousands in flight at once).
    """

    shared: dict[str, dict[str, _Shared]] = field(default_factory=dict)
    expiring: set[asyncio.Future[None]] = field(default_factory=set)

    async def get(self, config: SandboxConfig, scope_key: str, endpoint: EndpointTarget | None, labels: list[str]) -> Sandbox:
        key = config.model_dump_json()
        scope = self.shared.setdefault(scope_key, {})
        entry = scope.get(key)
        if entry is None:
            future = asyncio.ensure_future(get_manager().create(config, endpoint=endpoint, labels=labels))
            entry = scope[key] = _Shared(future)
            future.add_done_callback(lambda done: self._start_lifetime(scope_key, key, config, done))
        return await asyncio.shield(entry.future)

    def _start_lifetime(self, scope_key: str, key: str, config: SandboxConfig, done: asyncio.Future[Sandbox]) -> None:
        entry = self.shared.get(scope_key, {}).get(key)
        if entry is None or done.cancelled() or done.exception() is not None:
            return
        sandbox = done.result()

        def expire() -> None:
            logger.warning("sandbox %s reached timeout_minutes=%s; deleting it", sandbox.id, config.timeout_minutes)
            task = asyncio.ensure_future(get_manager().delete(sandbox))
            self.expiring.add(task)
            task.add_done_callback(self.expiring.discard)

        entry.lifetime = asyncio.get_running_loop().call_later(config.timeout_minutes * 60, expire)

    async def close(self, scope_key: str) -> list[Exception]:
        """Delete the sandboxes of one scope; returns the errors (each sandbox is still attempted)."""
        errors: list[Exception] = []
        for entry in self.shared.pop(scope_key, {}).values():
            if entry.lifetime is not None:
                entry.lifetime.cancel()
            if not entry.future.done():
                with contextlib.suppress(BaseException):
                    await entry.future
            if entry.future.cancelled() or entry.future.exception() is not None:
                continue
            try:
                await get_manager().delete(entry.future.result())
            except Exception as exc:
                errors.append(exc)
        return errors


@dataclass
class RolloutSandboxes:
    """One rollout's sandboxes: the program's (`"program"`) and those of toolsets and users."""

    scopes: SandboxScopes
    rollout_id: str
    group_id: str
    program: SandboxConfig | None
    endpoint: EndpointTarget | None
    used: set[str] = field(default_factory=set)

    def scope_key(self, config: SandboxConfig) -> str:
        if config.scope == "global":
            return "global"
        return f"group:{self.group_id}" if config.scope == "group" else f"rollout:{self.rollout_id}"

    async def get(self, config: SandboxConfig | str = "program") -> Sandbox:
        """The sandbox for `config` in this rollout's scope, created on first use.

        Raises:
            ConfigError: `"program"` was asked for but the rollout's program has no sandbox.
            SandboxError: the sandbox could not be created.
        """
        if isinstance(config, str):
            if config != "program":
                raise ConfigError(f"sandbox={config!r}: the only named sandbox is 'program' (the program's own)")
            if self.program is None:
                raise ConfigError(
                    "sandbox='program': this rollout's program has no sandbox; set Harness(sandbox=...) or program.sandbox"
                )
            config = self.program
        key = self.scope_key(config)
        self.used.add(key)
        return await self.scopes.get(config, key, self.endpoint, [f"rollout:{self.rollout_id}"])


__all__ = ["RolloutSandboxes", "SandboxScopes"]
