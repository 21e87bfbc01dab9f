"""Installing a sandboxed `fn` program's package without giving its build code the network.

Two steps in the program's sandbox:

1. With network, pip downloads the `[project.dependencies]` as wheels only
   (`--only-binary :all:`): no package code runs while the network is there,
   and no pip config file from the workspace is read (`PIP_CONFIG_FILE=/dev/null`).
2. Without network (no host loopback either), pip builds and installs the
   project from its uploaded source and the dependencies from those wheels
   (`--no-index --find-links`): a `setup.py` or build backend runs offline.

Dependencies are outside data (they come with the package): each must parse as a
PEP 508 requirement (`packaging.requirements.Requirement`) naming a package on the
index, with versions, extras or markers. A URL (bare or `pkg @ https://...`), a path
(`file:`, `./pkg`, `/abs`), an archive-looking name (`evil.whl`, `evil.tar.gz`, `.zip`)
or anything pip would read as an option is refused before pip runs, and a dependency
with no wheel for the sandbox's Python fails step 1 with pip's message.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from v1.errors import SandboxError
from v1.sandbox.backend import Sandbox

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PIP = ["python", "-m", "pip", "-q", "--disable-pip-version-check"]
PIP_ENV = {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"}
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.lz", ".egg")


def project_dependencies(project: Path) -> list[str]:
    """The `[project.dependencies]` of a project, each checked to be a plain requirement.

    Raises:
        SandboxError: a dependency is not a plain requirement (see the module docs).
    """
    try:
        data = tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{project / 'pyproject.toml'}: cannot read it: {exc}") from None
    dependencies = data.get("project", {}).get("dependencies", [])
    if not isinstance(dependencies, list):
        raise SandboxError(f"{project / 'pyproject.toml'}: [project.dependencies] must be a list of requirements")
    for dependency in dependencies:
        problem = _requirement_problem(dependency)
        if problem is not None:
            raise SandboxError(
                f"{project / 'pyproject.toml'}: dependency {dependency!r:.200} is not a plain requirement ({problem}; "
                "a sandboxed program's dependencies are installed from the package index as wheels, "
                "with no URLs, paths, archives or pip options)"
            )
    return dependencies


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
    """Download `project`'s dependencies as wheels (network), then install it from `source` offline.

    Raises:
        SandboxError: a dependency is refused, or a step failed (pip's message included).
    """
    dependencies = project_dependencies(project)
    wheels = f"{target}-wheels"
    steps: list[tuple[list[str], bool]] = []
    if dependencies:
        download = [*PIP[:3], "download", *PIP[3:], "--only-binary", ":all:", "--dest", wheels, "--", *dependencies]
        steps.append((download, True))
    install = [*PIP[:3], "install", *PIP[3:], "--no-build-isolation", "--no-index"]
    install += ["--find-links", wheels] if dependencies else []
    steps.append(([*install, "--target", target, source], False))
    for argv, network in steps:
        result = await sandbox.exec(argv, env=PIP_ENV, timeout=timeout, network=network)
        if not result.ok:
            raise SandboxError(
                f"installing {project.name} in sandbox {sandbox.id} failed: {(result.stderr or result.stdout)[-1500:]}"
            )


__all__ = ["install_project", "project_dependencies"]
