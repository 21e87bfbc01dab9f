"""Where results came from: versions and git commits of v1 and of the environment's package."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tomllib

V1_FOLDER = Path(__file__).parent


def git_commit(path: Path) -> str | None:
    """The commit checked out in the git work tree holding `path`, if any."""
    try:
        result = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def module_version(module_name: str | None) -> tuple[str | None, str | None]:
    """The version of the distribution named like the module's top package (else of the source checkout
    holding it), and that checkout's git commit."""
    if not module_name:
        return None, None
    top = module_name.split(".")[0]
    location = getattr(sys.modules.get(top), "__file__", None)
    folder = Path(location).parent if location else None
    version = None
    with contextlib.suppress(metadata.PackageNotFoundError):
        version = metadata.version(top)
    if version is None and folder is not None:
        pyproject = folder.parent / "pyproject.toml"
        with contextlib.suppress(OSError, ValueError, AttributeError):
            version = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("version")
    return version, git_commit(folder) if folder is not None else None


def version_info(env_module: str | None) -> dict[str, str | None]:
    """Versions and git commits of v1 and of the environment's package (None where unknown)."""
    vf_version, vf_commit = module_version("v1")
    env_version, env_commit = module_version(env_module)
    return {
        "vf_version": vf_version or "0.0.0+local",
        "vf_commit": vf_commit,
        "env_version": env_version,
        "env_commit": env_commit,
    }


__all__ = ["git_commit", "module_version", "version_info"]
