"""Installing a sandboxed `fn` program's package without giving its build code the network.

Two steps in the program's sandbox:

1. With network, pip downloads the `[project.dependencies]` as wheels only
   (`--only-binary :all:`): no package code runs while the network is there,
   and no pip config file from the workspace is read (`PIP_CONFIG_FILE=/dev/null`).
2. Without network (no host loopback either), pip builds and installs the
   project from its uploaded source and the dependencies from those wheels
   (`--no-index --find-links`): a `setup.py` or build backend runs offline.

Dependencies must be names with versions or markers; a direct reference
(`pkg @ https://...`) or anything pip would read as an option is refused, and a
dependency with no wheel for the sandbox's Python fails step 1 with pip's message.
"""

from __future__ import annotations

import sys
from pathlib import Path

from v1.errors import SandboxError
from v1.sandbox.backend import Sandbox

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PIP = ["python", "-m", "pip", "-q", "--disable-pip-version-check"]
PIP_ENV = {"PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1"}


def project_dependencies(project: Path) -> list[str]:
    """The `[project.dependencies]` of a project, each checked to be a plain requirement.

    Raises:
        SandboxError: a dependency is a direct reference, an option, or not a string.
    """
    try:
        data = tomllib.loads((project / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SandboxError(f"{project / 'pyproject.toml'}: cannot read it: {exc}") from None
    dependencies = data.get("project", {}).get("dependencies", [])
    if not isinstance(dependencies, list):
        raise SandboxError(f"{project / 'pyproject.toml'}: [project.dependencies] must be a list of requirements")
    for dependency in dependencies:
        if not isinstance(dependency, str) or dependency.lstrip().startswith("-") or "@" in dependency:
            raise SandboxError(
                f"{project / 'pyproject.toml'}: dependency {dependency!r} is not a plain requirement "
                "(a sandboxed program's dependencies are installed from the package index as wheels, "
                "with no direct references or pip options)"
            )
    return dependencies


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
