"""Agents from PyPI, installed once per machine into a virtual environment per package, version and Python.

The environments live in the agent cache (`harnesses.npm.cache_root()`) under
`pypi/<name>@<version>-py<major><minor>`, each built by the running Python's
`venv` (without pip) and filled by the running Python's pip (`pip --python`),
so the agent's dependencies never mix with the framework's. A file lock makes
concurrent processes build an environment once; a marker file written last
tells a finished environment from a crashed one, which the next install
replaces. Local sandboxes see the whole cache read-only (`MOUNT_POINT`) and run
the agent with the environment's own interpreter (`python -m <module>`), so its
console scripts (whose first line names the host path) are never needed.
"""

from __future__ import annotations

import asyncio
import fcntl
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harnesses.npm import cache_root
from harnesses.packages import AgentInstall
from v1.errors import ProgramError

PYTHON_ENV = "V1_AGENT_PYTHON"
"""The variable holding the interpreter that runs a PyPI agent inside the sandbox."""
INSTALL_TIMEOUT = 600.0
MARKER = "installed"
_INSTALLS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="v1-pypi-install")


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:])


@dataclass(frozen=True)
class PypiPackage:
    """A PyPI distribution pinned to one version, with extra pins."""

    registry: ClassVar[str] = "pypi"
    name: str
    version: str
    pins: tuple[str, ...] = field(default_factory=tuple)
    """Further requirements installed with it (`"litellm==1.2.3"`): the agent's own dependencies, held still."""

    @property
    def key(self) -> str:
        """The environment's directory under `pypi/` in the cache: `name@version-pyXY` (a venv fits one Python)."""
        return f"{self.name}@{self.version}-py{sys.version_info.major}{sys.version_info.minor}"

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def requirements(self) -> list[str]:
        """What pip installs: the package and its pins."""
        return [self.spec, *self.pins]

    def directory(self, root: str | Path) -> str:
        """The environment's directory when the cache is at `root` (the host path or `MOUNT_POINT`)."""
        return f"{root}/pypi/{self.key}"

    def python(self, root: str | Path) -> str:
        """The environment's interpreter when the cache is at `root`."""
        return f"{self.directory(root)}/venv/bin/python"

    def mounted(self, root: str) -> AgentInstall:
        return AgentInstall(env={PYTHON_ENV: self.python(root)})

    def in_sandbox(self, workdir: str) -> tuple[list[str], AgentInstall]:
        """Installed by the sandbox's pip into its package directory, which its `python` finds."""
        return self.requirements, AgentInstall(env={PYTHON_ENV: "python"})

    def installed(self) -> bool:
        return (Path(self.directory(cache_root())) / MARKER).exists()

    async def install(self, timeout: float = INSTALL_TIMEOUT) -> Path:
        """The environment's directory, built first if it is not there yet.

        Raises:
            ProgramError: the venv or the pip install failed (their last output lines included) or took too long.
        """
        if self.installed():
            return Path(self.directory(cache_root()))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_INSTALLS, self._install_locked, timeout)

    def _install_locked(self, timeout: float) -> Path:
        root = cache_root() / "pypi"
        root.mkdir(parents=True, exist_ok=True)
        target = Path(self.directory(cache_root()))
        with open(root / f".{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.installed():
                return target
            shutil.rmtree(target, ignore_errors=True)  # what a crashed install left
            try:
                self._run([sys.executable, "-m", "venv", "--without-pip", str(target / "venv")], timeout, "python -m venv")
                pip = [sys.executable, "-m", "pip", "--python", self.python(cache_root()), "install"]
                pip += ["--no-input", "--quiet", "--disable-pip-version-check", *self.requirements]
                self._run(pip, timeout, f"pip install {' '.join(self.requirements)}")
                (target / MARKER).write_text(" ".join(self.requirements) + "\n")
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
        return target

    @staticmethod
    def _run(command: Sequence[str], timeout: float, what: str) -> None:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise ProgramError(f"{what} took longer than {timeout:g} s") from None
        if done.returncode != 0:
            raise ProgramError(f"{what} exited {done.returncode}: {_tail(done.stderr or done.stdout)}")


__all__ = ["PYTHON_ENV", "PypiPackage"]
