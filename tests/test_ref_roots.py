"""Refs in a TOML resolve against the TOML's folder and the current directory, without PYTHONPATH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S
from v1.cli import main
from v1.testing import MockModelServer

MODULE = """
def rows():
    return [{"question": "ping", "answer": "ping"}]

def same(completion, answer):
    return float(completion[-1]["content"] == answer)
"""
CONFIG = '[env.taskset]\nsource = "{0}:rows"\nrewards = ["{0}:same"]\n[env.harness]\nmax_turns = 1\n'


def run_eval(cwd: Path, target: str, url: str) -> subprocess.CompletedProcess[str]:
    # -P: the current directory is not put on sys.path by Python itself (as with the installed `v1` script).
    command = [sys.executable, "-P", "-m", "v1.cli", "eval", target, "-m", "mock", "-b", url, "-n", "1", "-r", "1"]
    return subprocess.run([*command, "--output-dir", "out"], cwd=cwd, capture_output=True, text=True, timeout=HANG_S)


def avg_reward(cwd: Path) -> float:
    (run,) = (cwd / "out").iterdir()
    return json.loads((run / "metadata.json").read_text())["avg_reward"]


def test_a_ref_resolves_next_to_the_toml_and_in_the_current_directory(tmp_path: Path) -> None:
    beside = tmp_path / "beside"
    (beside / "envs").mkdir(parents=True)
    (beside / "envs" / "beside_env.py").write_text(MODULE)
    (beside / "envs" / "env.toml").write_text(CONFIG.format("beside_env"))
    here = tmp_path / "here"
    (here / "configs").mkdir(parents=True)
    (here / "cwd_env.py").write_text(MODULE)
    (here / "configs" / "env.toml").write_text(CONFIG.format("cwd_env"))
    with MockModelServer(model="mock") as mock:
        for cwd, target in ((beside, "envs/env.toml"), (here, "configs/env.toml")):
            result = run_eval(cwd, target, mock.url)
            assert result.returncode == 0, result.stderr
            assert avg_reward(cwd) == 1.0


def test_a_missing_module_is_one_line_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "env.toml").write_text(CONFIG.format("no_such_env"))
    with MockModelServer(model="mock") as mock:
        result = run_eval(tmp_path, "env.toml", mock.url)
    assert result.returncode == 2
    assert "env.taskset.source" in result.stderr and "no_such_env" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_folder_that_is_not_a_package_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "not_a_package").mkdir()
    assert main(["eval", str(tmp_path / "not_a_package"), "-m", "m", "-b", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "has no __init__.py" in err and len(err.strip().splitlines()) == 1
