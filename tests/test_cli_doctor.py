"""`v1 doctor` against real broken environments: one line per problem and exit 1; a healthy one exits 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.tools.patience import HANG_S
from tests.tools.venvs import venv_seeing_these_packages

REPO = Path(__file__).resolve().parent.parent

# A torchvision built for another torch, as the CPU vLLM wheel brings: its import fails in its C++ operators.
FOREIGN_TORCHVISION = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


def doctor(python: str | Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [str(python), "-m", "v1.cli", "doctor"], cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S
    )


def test_the_suspects_are_what_the_managed_vllm_venv_removes() -> None:
    from v1.cli._doctor import FOREIGN_TORCH_BUILDS
    from v1.inference._vllm_env import BROKEN_EXTRAS

    assert FOREIGN_TORCH_BUILDS == BROKEN_EXTRAS


def test_a_healthy_environment_has_no_problems() -> None:
    done = doctor(sys.executable)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "v1 doctor: no problems found (checked: transformers imports, bubblewrap, pip for sandboxed installs)\n"
    assert "v1 doctor" not in done.stderr


def test_each_broken_part_is_one_line_and_exit_1(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    (foreign / "torchvision").mkdir(parents=True)
    (foreign / "torchvision" / "__init__.py").write_text(FOREIGN_TORCHVISION)
    (foreign / "torchvision-0.99.0.dist-info").mkdir()
    (foreign / "torchvision-0.99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.99.0\n"
    )
    python = venv_seeing_these_packages(tmp_path / "venv", first=[foreign], without=["pip"])
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    done = doctor(python, path=str(no_bwrap))
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = [line for line in done.stderr.splitlines() if line.startswith("v1 doctor:")]
    assert len(lines) == 3, done.stderr
    transformers, sandbox, pip = lines
    assert transformers.startswith("v1 doctor: transformers: `from transformers import PreTrainedModel` fails (")
    assert "RuntimeError: operator torchvision::nms does not exist" in transformers
    assert "torchvision 0.99.0" in transformers and "`pip uninstall torchvision`" in transformers
    assert sandbox.startswith("v1 doctor: sandbox: the local sandbox backend needs bubblewrap (`bwrap`), which is not installed")
    assert pip == f"v1 doctor: pip: not installed for {python}, and sandboxed fn programs install their package with " + (
        f"`python -m pip`: run `{python} -m ensurepip`"
    )


def test_the_probes_never_import_a_transformers_py_from_the_working_directory(tmp_path: Path) -> None:
    """A downloaded task folder or cloned repo with a `transformers.py`: `v1 doctor` run there must not run it."""
    marker = tmp_path / "ran"
    (tmp_path / "transformers.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\nclass PreTrainedModel: ...\n")
    script = shutil.which("v1")
    assert script, "the v1 script is missing: install the package (pip install -e .)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in ([script, "doctor"], [sys.executable, "-m", "v1.cli", "doctor"]):
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
        assert done.returncode == 0, done.stderr
        assert "no problems found (checked: transformers imports" in done.stdout
        assert not marker.exists(), command
