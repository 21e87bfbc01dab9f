"""`SandboxMixin`: one sandbox per rollout for a classic environment, found again by `state["sandbox_id"]`.

A classic environment's state holds JSON only, so the live sandbox stays with the
environment and the state holds its id (the seed's `sandbox_id`). Sandboxes are
created through the sandbox manager (host-wide cap, ledger, retries) and live at
most `timeout_minutes` (`SandboxScopes`); `delete_sandbox` ends one, and
`delete_all_sandboxes` whatever a run left behind.
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from v1.classic._sandbox_fields import run_shell
from v1.config import SandboxConfig
from v1.errors import SandboxError
from v1.sandbox import ExecResult, Sandbox, SandboxScopes, get_manager


@dataclass
class _Live:
    sandbox: Sandbox
    scope_key: str


class SandboxMixin:
    """Per-rollout sandboxes for a classic environment; set `sandbox_config` before use."""

    sandbox_config: SandboxConfig

    def init_sandboxes(self, config: SandboxConfig) -> None:
        """Use `config` for every rollout's sandbox (call from `__init__`)."""
        self.sandbox_config = config
        self._sandbox_scopes = SandboxScopes()
        self._live_sandboxes: dict[str, _Live] = {}

    @property
    def timeout_per_command_seconds(self) -> float:
        return self.sandbox_config.command_timeout

    async def create_sandbox(self, state: MutableMapping[str, Any], config: SandboxConfig | None = None) -> Sandbox:
        """A new sandbox for this rollout; its id goes to `state["sandbox_id"]`.

        Raises:
            SandboxError: the sandbox could not be created (its backend is missing, or it failed to start).
        """
        scope_key = f"classic:{uuid.uuid4().hex}"
        labels = [f"env:{type(self).__name__}"]
        sandbox = await self._sandbox_scopes.get(config or self.sandbox_config, scope_key, None, labels)
        self._live_sandboxes[sandbox.id] = _Live(sandbox, scope_key)
        state["sandbox_id"] = sandbox.id
        return sandbox

    def get_sandbox(self, state_or_id: MutableMapping[str, Any] | str) -> Sandbox:
        """The live sandbox of a rollout (or of a sandbox id).

        Raises:
            SandboxError: the rollout has no sandbox, or it was deleted (e.g. at `timeout_minutes`).
        """
        sandbox_id = state_or_id if isinstance(state_or_id, str) else state_or_id.get("sandbox_id")
        live = self._live_sandboxes.get(sandbox_id) if isinstance(sandbox_id, str) else None
        if live is None:
            raise SandboxError(f"no live sandbox {sandbox_id!r} in this environment (never created, or already deleted)")
        if live.sandbox.id not in get_manager().leases:
            minutes = self.sandbox_config.timeout_minutes
            raise SandboxError(f"sandbox {live.sandbox.id} is gone: it reached timeout_minutes={minutes:g} and was deleted")
        return live.sandbox

    async def run_command(self, sandbox_id: str, command: str, working_dir: str | None = None) -> str:
        """Run a shell command in a rollout's sandbox under `timeout_per_command_seconds`; its output as text."""
        return await run_shell(self.get_sandbox(sandbox_id), command, self.timeout_per_command_seconds, working_dir)

    async def exec_in_sandbox(self, sandbox_id: str, argv: list[str], timeout: float | None = None) -> ExecResult:
        """Run `argv` in a rollout's sandbox (default timeout: `timeout_per_command_seconds`)."""
        sandbox = self.get_sandbox(sandbox_id)
        return await sandbox.exec(argv, timeout=timeout or self.timeout_per_command_seconds)

    async def delete_sandbox(self, state_or_id: MutableMapping[str, Any] | str) -> None:
        """Delete a rollout's sandbox (nothing if it has none or it is gone).

        Raises:
            SandboxError: the backend kept failing to delete it (it stays listed for `v1 sandbox reap`).
        """
        sandbox_id = state_or_id if isinstance(state_or_id, str) else state_or_id.get("sandbox_id")
        live = self._live_sandboxes.pop(sandbox_id, None) if isinstance(sandbox_id, str) else None
        if live is not None:
            errors = await self._sandbox_scopes.close(live.scope_key)
            if errors:
                raise errors[0]

    async def delete_all_sandboxes(self) -> None:
        """Delete every sandbox this environment still holds (teardown); each is attempted.

        Raises:
            SandboxError: the first deletion that failed (the sandbox stays listed for `v1 sandbox reap`).
        """
        failures: list[Exception] = []
        for sandbox_id in list(self._live_sandboxes):
            try:
                await self.delete_sandbox(sandbox_id)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    def live_sandbox_ids(self) -> list[str]:
        """Ids of the sandboxes this environment holds now."""
        return list(self._live_sandboxes)


__all__ = ["SandboxMixin"]
