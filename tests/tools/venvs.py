"""Venvs for tests that need a Python environment other than this one, built without a download."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.tools.patience import HANG_S


def site_dirs() -> list[str]:
    """The folders this interpreter imports installed packages from (a venv's own, its base's, .pth additions).

    A venv made with ``--system-site-packages`` from inside a venv would see its *base* Python's instead.
    """
    return [entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages") and Path(entry).is_dir()]


def venv_seeing_these_packages(venv: Path, first: Sequence[Path] = (), without: Sequence[str] = ()) -> Path:
    """A venv (no pip of its own) that imports this interpreter's packages, after `first`, less the `without` ones.

    Returns:
        The venv's python.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=HANG_S)
    (site,) = venv.glob("lib/python*/site-packages")
    folders = [str(path) for path in first]
    for index, folder in enumerate(site_dirs()):
        if without:  # a copy of the folder made of links, less the packages left out
            filtered = venv / f"filtered-site-{index}"
            filtered.mkdir()
            for entry in Path(folder).iterdir():
                if entry.name.split("-")[0].split(".")[0].lower() not in without:
                    (filtered / entry.name).symlink_to(entry)
            folder = str(filtered)
        folders.append(folder)
    (site / "seen.pth").write_text("\n".join(folders) + "\n")
    return venv / "bin" / "python"


__all__ = ["site_dirs", "venv_seeing_these_packages"]
