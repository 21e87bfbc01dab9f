"""Saved result files are outside data (V2): a line nested 200,000 deep in `results.jsonl`, or a
`pass_threshold` that is not a number in `metadata.json`, is reported in one line naming the file
and line, and the rest of the run still loads, in `v1 view`'s JSON API and in `v1 eval --resume`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, reverser

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "reverse_text.toml")
DEEP_LINE = '{"example_id": ' + "[" * 200_000 + "]" * 200_000 + "}\n"


def v1_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "v1.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A real run of 4 rollouts, and two tampered copies of it: `deep` (line 2) and `threshold`."""
    base = tmp_path_factory.mktemp("runs")
    with MockModelServer(reverser, model="m") as server:
        done = v1_cli("eval", CONFIG, "-m", "m", "-b", server.url, "-n", "4", "-r", "1", "--output-dir", str(base / "evals"))
        assert done.returncode == 0, done.stderr
        (run,) = [path.parent for path in (base / "evals").rglob("metadata.json")]
        deep = base / "deep"
        shutil.copytree(run, deep)
        lines = (deep / "results.jsonl").read_text().splitlines(keepends=True)
        (deep / "results.jsonl").write_text(lines[0] + DEEP_LINE + "".join(lines[1:]))
        threshold = base / "threshold"
        shutil.copytree(run, threshold)
        metadata = json.loads((threshold / "metadata.json").read_text())
        (threshold / "metadata.json").write_text(json.dumps({**metadata, "pass_threshold": "high"}))
        yield base, server.url


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=HANG_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()[:300]


def test_v1_views_run_apis_report_the_bad_line_and_field_and_load_the_rest(runs: tuple[Path, str]) -> None:
    base, _ = runs
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(base), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        status, listing = get(url + "/api/runs")
        assert status == 200, listing
        rows = {row["id"]: row for row in listing["runs"]}
        assert rows["0/threshold"]["rollouts"] == 4
        assert rows["0/threshold"]["problem"] == "metadata.json: pass_threshold is not a number ('high'); 0.5 is used"
        for run_id in ("0/deep", "0/threshold"):
            quoted = urllib.parse.quote(run_id)
            for path in (f"/api/run?id={quoted}", f"/api/rollouts?id={quoted}", f"/api/rollout?id={quoted}&n=0"):
                status, body = get(url + path)
                assert status == 200, (path, body)
        _, detail = get(url + "/api/run?id=0/deep")
        assert detail["results"]["bad_lines"] == [2] and detail["results"]["count"] == 4
        _, detail = get(url + "/api/run?id=0/threshold")
        assert detail["metadata_problem"].startswith("metadata.json: pass_threshold is not a number")
        assert detail["results"]["summary"]["pass_threshold"] == 0.5
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)


def test_resume_reports_the_bad_line_in_one_line_and_loads_the_rest(runs: tuple[Path, str]) -> None:
    base, url = runs
    # a resume repeats the command
    resumed = v1_cli("eval", CONFIG, "-m", "m", "-b", url, "-n", "4", "-r", "1", "--resume", str(base / "deep"))
    assert resumed.returncode == 0, resumed.stderr
    results = base / "deep" / "results.jsonl"
    [named] = [line for line in resumed.stderr.splitlines() if f"{results} line 2" in line]
    assert "nested more than 128 levels deep" in named
    saved = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(output["example_id"] for output in saved) == [0, 1, 2, 3]
    assert all(output["error"] is None for output in saved)


def test_training_reads_saved_lines_bounded_in_one_line(tmp_path: Path) -> None:
    """`sft.data` (a saved `results.jsonl`) and a run folder's `metrics.jsonl` go through the bounded reader too."""
    from v1.errors import ConfigError, Error
    from v1.train._outputs import read_metrics
    from v1.train._sft import samples_from_results

    results = tmp_path / "results.jsonl"
    for line, expected in ((DEEP_LINE, "line 2: nested more than 128 levels deep"), ("[1]\n", "line 2: not a JSON object")):
        results.write_text('{"reward": 1.0}\n' + line, encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            samples_from_results(results)
        assert str(caught.value) == f"sft.data {results} {expected}"
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n' + DEEP_LINE, encoding="utf-8")
    with pytest.raises(Error) as refused:
        read_metrics(metrics)
    assert str(refused.value) == f"{metrics} line 2: nested more than 128 levels deep"
