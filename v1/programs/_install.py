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

Dependencies and build requirements are outside data (they come with the package): each must parse as a
PEP 508 requirement (`packaging.requirements.Requirement`) naming a package on the
index, with versions, extras or markers. A URL (bare or `pkg @ https://...`), a path
(`file:`, `./pkg`, `/abs`), an archive-looking name (`evil.whl`, `evil.tar.gz`, `.zip`)
or anything pip would read as an option is refused before pip runs, and a dependency
with no wheel for the sandbox's Python fails step 1 with pip's message.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from v1.errors import SandboxError
from v1.sandbox import Sandbox

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PIP = ["python", "-m", "pip", "-q", "--disable-pip-version-check"]
PIP_ENV = {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"}
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.lz", ".egg")


DEFAULT_BUILD_REQUIRES = ["setuptools>=40.8.0", "wheel"]
"""What pip builds a project with when its pyproject.toml has no ``[build-system]`` (pip's fallback; older pips ask for wheel too)."""


def _read_pyproject(project: Path) -> dict[str, Any]:
    try:
        return tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{project / 'pyproject.toml'}: cannot read it: {exc}") from None


def _plain_requirements(requirements: object, project: Path, table: str) -> list[str]:
    if not isinstance(requirements, list):
        raise SandboxError(f"{project / 'pyproject.toml'}: {table} must be a list of requirements")
    for requirement in requirements:
        problem = _requirement_problem(requirement)
        if problem is not None:
            raise SandboxError(
                f"{project / 'pyproject.toml'}: {table}: {requirement!r:.200} is not a plain requirement ({problem}; "
                "a sandboxed program's requirements are installed from the package index as wheels, "
                "with no URLs, paths, archives or pip options)"
            )
    return requirements


def project_dependencies(project: Path) -> list[str]:
    """The `[project.dependencies]` of a project, each checked to be a plain requirement.

    Raises:
        SandboxError: a dependency is not a plain requirement (see the module docs).
    """
    dependencies = _read_pyproject(project).get("project", {}).get("dependencies", [])
    return _plain_requirements(dependencies, project, "[project.dependencies]")


def build_requirements(project: Path) -> list[str]:
    """The `[build-system].requires` of a project (pip's default without one), each a plain requirement.

    Raises:
        SandboxError: a requirement is not a plain requirement (see the module docs).
    """
    build_system = _read_pyproject(project).get("build-system")
    if build_system is None:
        return list(DEFAULT_BUILD_REQUIRES)
    requires = build_system.get("requires", []) if isinstance(build_system, dict) else None
    return _plain_requirements(requires, project, "[build-system].requires")


def _requirement_problem(dependency: object) -> str | None:
    """Why `dependency` is not a requirement on the index (None when it is one)."""
    if not isinstance(dependency, str):
        return f"a {type(dependency).__name__}, not a string"
    if dependency.lstrip().startswith("-"):
        return "a pip option"
    try:
        requirement = Requirement(dependency)
    except InvalidRequirement:
        return "not a PEP 508 requirement: a URL, a path or a typo"
    if requirement.url is not None:
        return "a direct reference"
    if requirement.name.lower().endswith(ARCHIVE_SUFFIXES):
        return "an archive file's name"
    return None


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
