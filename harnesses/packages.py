"""What an agent's package tells its harness, whichever registry it comes from (`harnesses.npm`, `harnesses.pypi`).

A package is installed once per machine into the agent cache, which a local
sandbox sees read-only at a mount point (`mounted`); a sandbox of another
backend installs it itself, from the entries it adds to `SandboxConfig.packages`
(`in_sandbox`). Either way the harness learns where the agent is: a directory to
put first on `PATH` and variables to set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol


@dataclass(frozen=True)
class AgentInstall:
    """Where a sandbox finds an installed agent."""

    bin_dir: str = ""
    """Put first on the agent's `PATH` (empty: nothing to add)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the agent's script reads (a PyPI agent's interpreter, ...)."""


class AgentPackage(Protocol):
    """An agent's package pinned to one version (`NpmPackage`, `PypiPackage`)."""

    registry: ClassVar[str]
    """`npm` or `pypi`: where the package comes from (the compatibility table names it)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def spec(self) -> str: ...

    def installed(self) -> bool: ...

    async def install(self, timeout: float) -> Path:
        """Install it into the cache unless it is there; raises `ProgramError` when that fails."""
        ...

    def mounted(self, root: str) -> AgentInstall:
        """Where the agent is when the cache is shown at `root`."""
        ...

    def in_sandbox(self, workdir: str) -> tuple[list[str], AgentInstall]:
        """The `SandboxConfig.packages` entries installing it at sandbox creation, and where it lands."""
        ...


__all__ = ["AgentInstall", "AgentPackage"]
