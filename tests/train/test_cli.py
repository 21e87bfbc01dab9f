"""`v1 train` and `v1 sft` as real subprocesses: bad input is one line and exit 2; sft writes a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S
from v1.cli import main

ROOT = Path(__file__).resolve().parents[2]


def v1(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (None, [], "no such file"),
        ("output_dir = 3\n[env]\nid = 'x'\n", [], "field 'output_dir'"),
        ("[env]\nid = 'tasksets.first_letter'\n[rollouts]\nbogus = 1\n", [], "field 'rollouts.bogus': unknown field"),
        ("[env]\nid = 'tasksets.first_letter'\n[loss]\nkind = 'ppo'\n", [], "field 'loss.kind'"),
        ("[env]\nid = 'tasksets.first_letter'\n[loss]\nkind = 'sft'\n", [], "loss.kind = 'sft' is the objective v1 sft"),
        ("share_prefixes = 2\n[env]\nid = 'tasksets.first_letter'\n", [], "field 'share_prefixes'"),
        ("share_prefixes = 'sometimes'\n[env]\nid = 'tasksets.first_letter'\n", [], "field 'share_prefixes'"),
        ("[env]\nid = 'tasksets.first_letter'\n", ["--max-steps", "-1"], "--max-steps must be >= 0"),
        ("[env]\nid = 'no_such_env_module'\n[model]\ntiny = {}\n", [], "no_such_env_module"),
        ("[env]\nid = 'tasksets.first_letter'\n", ["--resume"], "no checkpoint"),
        ("[env]\nid = 'tasksets.first_letter'\n", [], "[model]: set path"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str | None, args: list[str], message: str
) -> None:
    path = tmp_path / "run.toml"
    if config is not None:
        path.write_text(config)
    code = main(["train", str(path), "--output-dir", str(tmp_path / "out"), "--no-progress", *args])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("v1 train: error:") and message in lines[0], stderr


def test_sft_on_reference_answers_writes_a_model(tmp_path: Path) -> None:
    config = tmp_path / "sft.toml"
    config.write_text(
        "micro_batch_size = 16\n[model]\ntiny = { hidden_size = 32, intermediate_size = 64 }\n"
        "[env]\nid = 'tasksets.first_letter'\n[sft]\nsteps = 3\nbatch_size = 8\nlr = 0.01\n"
        "[optim]\nlr = 0.5\nwarmup_steps = 10\nschedule = 'cosine'\nupdates_per_step = 2\n"  # RL's optimizer: not SFT's
        "[loss]\nkind = 'dapo'\nkl_coef = 0.1\n"  # RL's loss (a KL term needs a reference RL has): not SFT's
    )
    result = v1("sft", str(config), "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "v1 sft: 3 steps" in result.stdout
    lines = [json.loads(line) for line in (tmp_path / "out" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3] and lines[-1]["loss"] < lines[0]["loss"]
    assert [line["lr"] for line in lines] == [0.01, 0.01, 0.01]  # [sft] lr, constant, as v1 train's warm-up
    assert "clip_fraction" not in lines[0] and "kl" not in lines[0]  # the sft objective has no sampler ratio
    assert (tmp_path / "out" / "sft" / "model" / "config.json").is_file()
    assert (tmp_path / "out" / "sft" / "model" / "tokenizer.json").is_file()


def test_import_v1_does_not_import_torch(tmp_path: Path) -> None:
    code = "import sys, v1, v1.cli, v1.train; v1.train.TrainConfig; assert 'torch' not in sys.modules, 'import v1 imported torch'"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
