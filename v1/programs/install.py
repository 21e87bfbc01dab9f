"""Installing a sandboxed `fn` program's package without giving its build code the network.

Two steps in the program's sandbox:

1. With network, pip downloads the `[project.dependencies]` and the
   `[build-system].requires` as wheels only (`--only-binary :all:`): no package
   code runs while the network is there, and no pip config file from the
   workspace is read (`PIP_CONFIG_FILE=/dev/null`).
2. Without network (no host loopback either), pip builds and installs the
   project from its uploaded source and the dependencies from those wheels
   (`--no-index --find-links`): a `setup.py` or build backend runs offline, in
   pip's isolated build environment made from the downloaded build requirements,
   so the install never depends on the build tools of the user's venv (a fresh
   venv's setuptools 65 has no `bdist_wheel`).

Requirements must be names with versions or markers; a direct reference
(`pkg @ https://...`) or anything pip would read as an option is refused, and a
requirement with no wheel for the sandbox's Python fails step 1 with pip's message.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from v1.errors import SandboxError
from v1.sandbox.backend import Sandbox

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PIP = ["python", "-m", "pip", "-q", "--disable-pip-version-check"]
PIP_ENV = {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"}


DEFAULT_BUILD_REQUIRES = ["setuptools>=40.8.0"]
"""What pip builds a project with when its pyproject.toml has no ``[build-system]`` (PEP 517's fallback)."""


def _read_pyproject(project: Path) -> dict[str, Any]:
    try:
        return tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{project / 'pyproject.toml'}: cannot read it: {exc}") from None


def _plain_requirements(requirements: object, project: Path, table: str) -> list[str]:
    if not isinstance(requirements, list):
        raise SandboxError(f"{project / 'pyproject.toml'}: {table} must be a list of requirements")
    for requirement in requirements:
        if not isinstance(requirement, str) or requirement.lstrip().startswith("-") or "@" in requirement:
            raise SandboxError(
                f"{project / 'pyproject.toml'}: {table}: {requirement!r} is not a plain requirement "
                "(a sandboxed program's requirements are installed from the package index as wheels, "
                "with no direct references or pip options)"
            )
    return requirements


def project_dependencies(project: Path) -> list[str]:
    """The `[project.dependencies]` of a project, each checked to be a plain requirement.

    Raises:
        SandboxError: a dependency is a direct reference, an option, or not a string.
    """
    dependencies = _read_pyproject(project).get("project", {}).get("dependencies", [])
    return _plain_requirements(dependencies, project, "[project.dependencies]")


def build_requirements(project: Path) -> list[str]:
    """The `[build-system].requires` of a project (pip's default without one), each a plain requirement.

    Raises:
        SandboxError: a requirement is a direct reference, an option, or not a string.
    """
    build_system = _read_pyproject(project).get("build-system")
    if build_system is None:
        return list(DEFAULT_BUILD_REQUIRES)
    requires = build_system.get("requires", []) if isinstance(build_system, dict) else None
    return _plain_requirements(requires, project, "[build-system].requires")


async def install_project(sandbox: Sandbox, project: Path, source: str, target: str, timeout: float) -> None:
    """Download `project`'s dependencies and build requirements as wheels (network), then install it from `source` offline.

    Raises:
        SandboxError: a requirement is refused, or a step failed (pip's message included).
    """
    wheels = f"{target}-wheels"
    download = [*PIP[:3], "download", *PIP[3:], "--only-binary", ":all:", "--dest", wheels, "--"]
    # two downloads: the build runs in its own environment, so its requirements need not agree with the dependencies
    steps = [
        ([*download, *requirements], True)
        for requirements in (build_requirements(project), project_dependencies(project))
        if requirements
    ]
    steps.append(([*PIP[:3], "install", *PIP[3:], "--no-index", "--find-links", wheels, "--target", target, source], False))
    for argv, network in steps:
        result = await sandbox.exec(argv, env=PIP_ENV, timeout=timeout, network=network)
        if not result.ok:
            raise SandboxError(
                f"installing {project.name} in sandbox {sandbox.id} failed: {(result.stderr or result.stdout)[-1500:]}"
            )


__all__ = ["DEFAULT_BUILD_REQUIRES", "build_requirements", "install_project", "project_dependencies"]
