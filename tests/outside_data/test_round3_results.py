"""Round 3 of result numbers as outside data: a model's 1e308 must not overflow a total, and a saved line's
``"nan"``, ``"x"`` or 400-digit integer must not crash `--resume` or reach `metadata.json` as NaN.

Each attack goes through the real CLI as a subprocess: `v1 eval` of a TOML environment whose reward
and metric read a number from the model's answer (the mock model answers ``1e308``), `v1 eval
--resume` of that run folder (whole, cut short, or with a tampered line), and `v1 view`'s HTTP API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, Reply

ROOT = Path(__file__).resolve().parents[2]
HUGE = 1e308
SOURCE = """
def rows():
    return [{"prompt": f"number {i}", "answer": "x"} for i in range(10)]


def model_number(completion) -> float:
    return float(completion[-1]["content"])
"""
CONFIG = """
[env]
name = "numbers"
[env.taskset]
taskset_id = "numbers"
source = "numbers_src:rows"
[[env.taskset.rewards]]
fn = "numbers_src:model_number"
weight = 1.0
[[env.taskset.metrics]]
fn = "numbers_src:model_number"
[env.harness]
max_turns = 1
"""


def v1_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.fixture(scope="module")
def huge_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, MockModelServer]]:
    """A finished `v1 eval` of two rollouts whose reward and metric are both 1e308, and its mock model."""
    folder = tmp_path_factory.mktemp("numbers")
    (folder / "numbers_src.py").write_text(SOURCE)
    (folder / "eval.toml").write_text(textwrap.dedent(CONFIG))
    with MockModelServer(lambda request: Reply.text(repr(HUGE)), model="m") as server:
        done = v1_cli(folder, "eval", "eval.toml", "-m", "m", "-b", server.url, "-n", "2", "-r", "1", "--output-dir", "out")
        assert done.returncode == 0, done.stderr
        (run,) = (folder / "out").iterdir()
        yield run, server


def eval_command(run: Path, server: MockModelServer) -> tuple[str, ...]:
    return ("eval", "eval.toml", "-m", "m", "-b", server.url, "-n", "2", "-r", "1", "--resume", str(run))


def copy_of(run: Path, name: str) -> Path:
    copy = run.parent.parent / name
    shutil.copytree(run, copy)
    return copy


def lines_of(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def test_two_values_of_1e308_average_to_1e308_in_v1_eval(huge_run: tuple[Path, MockModelServer]) -> None:
    run, _ = huge_run
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["avg_reward"] == HUGE and metadata["avg_metrics"] == {"model_number": HUGE}
    assert [(line["reward"], line["error"]) for line in lines_of(run)] == [(HUGE, None), (HUGE, None)]


def test_resume_of_the_run_and_of_a_cut_short_copy_agree(huge_run: tuple[Path, MockModelServer]) -> None:
    run, server = huge_run
    whole = copy_of(run, "whole")
    cut = copy_of(run, "cut")
    first = (cut / "results.jsonl").read_text().splitlines(keepends=True)[0]
    (cut / "results.jsonl").write_text(first)
    for folder in (whole, cut):
        resumed = v1_cli(run.parent.parent, *eval_command(folder, server))
        assert resumed.returncode == 0, resumed.stderr
        metadata = json.loads((folder / "metadata.json").read_text())
        assert metadata["avg_reward"] == HUGE and metadata["avg_metrics"] == {"model_number": HUGE}
        assert metadata["num_rollouts"] == 2 and len(lines_of(folder)) == 2


TAMPERED = [
    ("reward", "nan", "field 'reward': 'nan' is not a finite number"),
    ("reward", "x", "field 'reward': 'x' is not a finite number"),
    ("reward", 10**400, "field 'reward': '1000000000"),
    ("metrics", {"model_number": "inf"}, "field 'metrics.model_number': 'inf' is not a finite number"),
    ("metrics", [1], "field 'metrics': '[1]' is not a finite number"),
    ("token_usage", {"input_tokens": 10**400}, "field 'token_usage.input_tokens': "),
    ("timing", {"total": "slow"}, "field 'timing.total': 'slow' is not a finite number"),
    ("attempts", "x", "field 'attempts': 'x' is not a count"),
    ("model_retries", {"429": 10**400}, "field 'model_retries.429': "),
]
"""A saved field, a value an attacker writes there, and what the warning on `--resume` says of it."""


def test_resume_drops_a_line_with_a_number_that_is_not_one_and_redoes_its_rollout(tmp_path: Path) -> None:
    (tmp_path / "numbers_src.py").write_text(SOURCE)
    (tmp_path / "eval.toml").write_text(textwrap.dedent(CONFIG))
    count = str(len(TAMPERED) + 1)
    with MockModelServer(lambda request: Reply.text("0.5"), model="m") as server:
        command = ("eval", "eval.toml", "-m", "m", "-b", server.url, "-n", count, "-r", "1")
        done = v1_cli(tmp_path, *command, "--output-dir", "out")
        assert done.returncode == 0, done.stderr
        (run,) = (tmp_path / "out").iterdir()
        lines = sorted(lines_of(run), key=lambda line: line["example_id"])
        for line, (field, value, _) in zip(lines[1:], TAMPERED):
            line[field] = value
        (run / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        before = len(server.requests)
        resumed = v1_cli(tmp_path, *command, "--resume", str(run))
        assert resumed.returncode == 0, resumed.stderr
        for number, (_, _, named) in enumerate(TAMPERED, 2):
            [warning] = [line for line in resumed.stderr.splitlines() if f"results.jsonl line {number}:" in line]
            assert named in warning and warning.endswith("the line is dropped and its rollout redone"), warning
        assert len(server.requests) == before + len(TAMPERED)  # the dropped rollouts ran again, the kept one did not
        text = (run / "metadata.json").read_text()
        assert "NaN" not in text and "Infinity" not in text
        metadata = json.loads(text)
        assert metadata["avg_reward"] == 0.5 and metadata["num_rollouts"] == len(TAMPERED) + 1
        assert [line["reward"] for line in lines_of(run)] == [0.5] * (len(TAMPERED) + 1)
        again = v1_cli(tmp_path, *command, "--resume", str(run))  # and the folder resumes again
        assert again.returncode == 0, again.stderr


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=HANG_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()[:300]


def test_v1_views_apis_answer_for_values_of_1e308_and_a_400_digit_integer(huge_run: tuple[Path, MockModelServer]) -> None:
    run, _ = huge_run
    views = run.parent.parent / "views"
    shutil.copytree(run, views / "huge")
    wide = views / "wide"
    shutil.copytree(run, wide)
    lines = lines_of(wide)
    lines[0] |= {"reward": -HUGE, "token_usage": {"input_tokens": 10**400}, "metrics": {"model_number": 10**400}}
    (wide / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(views), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        status, detail = get(url + "/api/run?id=" + urllib.parse.quote("0/huge"))
        assert status == 200, detail
        assert detail["results"]["summary"]["avg_reward"] == HUGE
        assert detail["results"]["summary"]["avg_metrics"] == {"model_number": HUGE}
        quoted = urllib.parse.quote("0/wide")
        for path in (f"/api/run?id={quoted}", f"/api/rollouts?id={quoted}", f"/api/rollout?id={quoted}&n=0"):
            status, body = get(url + path)
            assert status == 200, (path, body)
        _, detail = get(url + f"/api/run?id={quoted}")
        assert detail["results"]["summary"]["avg_reward"] == 0.0  # -1e308 and 1e308
        status, compared = get(url + "/api/compare?a=" + urllib.parse.quote("0/huge") + "&b=" + quoted)
        assert status == 200, compared
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)
