"""A new user's venv: `python -m venv`, `pip install -e .` (no extras), then every sandboxed program form.

A fresh venv carries whatever build tools its Python's `ensurepip` bundles (setuptools 65 without
`wheel` on Python 3.11); nothing here may depend on them, nor on the `[test]` extra's pins. The venv is
built once per run of this module from the checkout; pip's own wheel cache keeps the rebuild short, and
`--no-compile` skips writing bytecode for the ~60 installed packages (over half of the install's CPU time; pip
never fails on it, so the install proves the same).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S

REPO = Path(__file__).resolve().parents[2]

AGENT_PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "plain-agent"
version = "0.1.0"

[tool.setuptools]
py-modules = ["plain_agent"]
"""

AGENT_MODULE = """
async def run(task, state):
    client = state.get_client()
    answer = await client.chat.completions.create(
        model=state.get_model(), messages=[{"role": "user", "content": task["prompt"][0]["content"]}]
    )
    return answer.choices[0].message.content
"""

COMMAND_AGENT = """
from openai import OpenAI

answer = OpenAI().chat.completions.create(model="any", messages=[{"role": "user", "content": "shout this"}])
print(answer.choices[0].message.content)
"""

EVERY_FORM = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])  # the agent project, as a user's checkout beside their code
import v1 as vf
from v1.testing import MockModelServer, Reply

FORMS = {
    "fn": ({"fn": "plain_agent:run", "sandbox": True}, None),
    "command": ({"command": ["python", "agent.py"], "files": {"agent.py": sys.argv[2]}}, {}),
    "base": ({"base": True}, {}),
}


async def main():
    seen = {}
    with MockModelServer() as mock:
        mock.responder = lambda request: Reply.text(request.last_user_text.upper())
        for name, (program, sandbox) in FORMS.items():
            harness = vf.Harness(
                client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", program=program, sandbox=sandbox
            )
            state = await harness.run({"prompt": "shout this"})
            seen[name] = {"error": state["error"], "completion": state["completion"], "v1": vf.__file__}
    print(json.dumps(seen))


asyncio.run(main())
"""


def user_environment() -> dict[str, str]:
    """This process's environment without what points Python at the checkout or at another venv."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    venv = tmp_path_factory.mktemp("plain") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=HANG_S)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", "-e", str(REPO)],
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    yield python


@pytest.mark.slow
def test_the_plain_venv_has_only_what_its_python_bundles(plain_venv: Path) -> None:
    """The premise: no `wheel`, and the build tools `ensurepip` gave it (v1's install must not add them)."""
    probe = "import importlib.util; print(importlib.util.find_spec('wheel') is None)"
    done = subprocess.run([str(plain_venv), "-c", probe], env=user_environment(), capture_output=True, text=True, timeout=HANG_S)
    assert done.stdout.strip() == "True", done.stderr


def test_every_sandboxed_program_form_runs_from_a_plain_venv(plain_venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "agent"
    project.mkdir()
    (project / "plain_agent.py").write_text(AGENT_MODULE)
    (project / "pyproject.toml").write_text(AGENT_PYPROJECT)
    env = user_environment() | {"V1_SANDBOX_ROOT": str(tmp_path / "sandboxes")}
    done = subprocess.run(
        [str(plain_venv), "-c", textwrap.dedent(EVERY_FORM), str(project), COMMAND_AGENT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert set(seen) == {"fn", "command", "base"}
    for form, result in seen.items():
        assert result["v1"].startswith(str(REPO)), (form, result["v1"])  # the checkout, through the venv's editable install
        assert result["error"] is None, (form, result["error"])
        assert result["completion"] == [{"role": "assistant", "content": "SHOUT THIS"}], form


def test_v1_doctor_finds_nothing_broken_in_a_plain_venv(plain_venv: Path) -> None:
    """No [train] extra is no problem; the console script works without PYTHONPATH."""
    doctor = plain_venv.parent / "v1"
    done = subprocess.run([str(doctor), "doctor"], env=user_environment(), capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("v1 doctor: no problems found"), done.stdout
