"""The README's GPU install resolves: pip's own resolver, against the package registry, on exactly its extras.

A pin in one extra (transformers in ``[train]``) once made ``[train,vllm]`` impossible to install while
every CPU test passed. This asks pip (``install --dry-run --ignore-installed``) for the README's GPU command,
so a pin that breaks it fails here. The command's second half holds every extra of its first (``[train,vllm]``
plus ``[flash]``): a set that resolves with more requirements resolves without them, so one run checks both.

flash-attn publishes only an sdist whose ``setup.py`` imports torch and ``wheel``; its metadata is built
here with ``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`` (no CUDA compiler on this machine), which changes
which extensions it would compile, not its requirements (``install_requires = ["torch", "einops"]``
either way), and ``--no-build-isolation``, as the README's command installs it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
RESOLVE_TIMEOUT_S = 1800.0
"""pip reads ~200 wheels (1-3 minutes on a 2-core machine, longer with an old pip); a hang guard, not a bound."""
GPU_COMMAND = re.compile(
    r'^python -m pip install -e "\.\[(?P<first>[a-z,]+)\]" wheel && '
    r'python -m pip install --no-build-isolation -e "\.\[(?P<second>[a-z,]+)\]"$',
    re.MULTILINE,
)


def gpu_command_extras() -> tuple[set[str], set[str]]:
    """The extras of the README's GPU command's two installs."""
    found = GPU_COMMAND.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found is not None, "README.md: the GPU install command is missing or changed shape"
    return set(found["first"].split(",")), set(found["second"].split(","))


def extra_requirements(extra: str) -> dict[str, Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {
        canonicalize_name(Requirement(spec).name): Requirement(spec)
        for spec in pyproject["project"]["optional-dependencies"][extra]
    }


def test_the_readme_gpu_command_installs_the_gpu_extras_in_two_steps() -> None:
    first, second = gpu_command_extras()
    assert {"train", "vllm"} <= first and "flash" not in first, "torch first: flash-attn's setup.py imports it"
    assert first | {"flash"} == second


@pytest.mark.slow
def test_the_gpu_extras_resolve_together(tmp_path: Path) -> None:
    _, extras = gpu_command_extras()
    report = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-build-isolation",
        "--quiet", "--report", str(report), f".[{','.join(sorted(extras))}]",
    ]  # fmt: skip
    env = {**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "PIP_NO_INPUT": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Location")]
    assert done.returncode == 0, "pip cannot resolve the GPU extras:\n" + "\n".join(errors[-15:])
    chosen = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in json.loads(report.read_text())["install"]
    }
    for extra in sorted(extras):
        for name, requirement in extra_requirements(extra).items():
            if requirement.marker is None or requirement.marker.evaluate():
                assert name in chosen, f"[{extra}] {requirement}: not in the resolved set"
                assert requirement.specifier.contains(chosen[name], prereleases=True), f"{name} {chosen[name]} vs {requirement}"
    assert chosen["transformers"] < Version("5.20"), "vllm 0.32.0 takes transformers < 5.20"
    assert chosen["torch"].base_version == "2.13.0"


def test_the_suite_runs_on_the_transformers_train_allows() -> None:
    """The train tests ran on a transformers inside [train]'s bound, the one the resolver test proves vllm takes."""
    import transformers

    train = extra_requirements("train")["transformers"]
    assert train.specifier.contains(Version(transformers.__version__)), (
        f"the tests run on transformers {transformers.__version__}, outside [train]'s {train.specifier}"
    )
