"""Every environment config in configs/ runs under `v1 eval` against the mock model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from v1.cli import main
from v1.env import load_environment
from v1.testing import MockModelServer

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(path for path in (ROOT / "configs").glob("*.toml") if path.name != "endpoints.toml")


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def test_every_environment_has_a_config() -> None:
    ids = {load_environment(path).taskset.taskset_id for path in CONFIGS}
    expected = {"reverse_text", "gsm8k", "competition_math", "math_python", "alphabet_sort", "wordle", "hangman"}
    assert expected | {"wiki_search", "harbor", "swe"} <= ids


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_v1_eval_runs_the_config(config: Path, mock: MockModelServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(["eval", str(config), "-m", "mock", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", str(out)])
    assert code == 0
    (run,) = out.iterdir()
    metadata = json.loads((run / "metadata.json").read_text())
    rollouts = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert metadata["num_rollouts"] == len(rollouts) == 2
    assert [r["error"] for r in rollouts] == [None, None]
    assert all(isinstance(r["reward"], float) for r in rollouts)
