"""End to end: `v1 eval` as a real process on stream tasksets against the mock model server.

The rows come from a generator in a module of the test's folder that records every row it yields in a
file and raises when drawn past a limit, so a run that listed the stream (a `len()`, a `rows()`) fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.patience import HANG_S
from v1.taskset import content_key
from v1.testing import MockModelServer, MockRequest, Reply

STREAM_MODULE = """
import itertools
import os
from pathlib import Path

import v1 as vf


def rows():
    drawn = Path(os.environ["STREAM_DRAWN"])
    limit = int(os.environ.get("STREAM_LIMIT", "-1"))
    fail_at = int(os.environ.get("STREAM_FAIL_AT", "-1"))
    for index in itertools.count():
        if index == fail_at:
            raise ValueError(f"generator broke at row {index}")
        if index == limit:
            raise AssertionError(f"drew past {limit} rows: something listed the stream")
        with drawn.open("a") as out:
            out.write(f"{index}\\n")
        yield {"question": f"q{index}", "answer": f"q{index}"[::-1]}


@vf.reward
def exact(completion, answer):
    return float(completion[-1]["content"] == answer)


def load_environment(seed=None, buffer=None, head=None):
    taskset = vf.Taskset(source=rows, infinite=True, taskset_id="stream", rewards=[exact])
    if seed is not None:
        taskset = taskset.shuffle(seed, buffer=buffer)
    if head is not None:
        taskset = taskset.head(head)
    return vf.Env(taskset)
"""

CONFIG = """
[env.taskset]
taskset_id = "stream"
source = "stream_rows:rows"
infinite = true

[[env.taskset.rewards]]
fn = "stream_rows:exact"
"""


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture
def server() -> Iterator[MockModelServer]:
    with MockModelServer(reverser, model="mock") as mock:
        yield mock


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "stream_rows.py").write_text(textwrap.dedent(STREAM_MODULE))
    (tmp_path / "stream.toml").write_text(CONFIG)
    return tmp_path


def v1_eval(folder: Path, *args: str, **variables: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(folder), "STREAM_DRAWN": str(folder / "drawn.txt")}
    env |= {f"STREAM_{name.upper()}": str(value) for name, value in variables.items()}
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", "eval", *args, "-r", "1", "--output-dir", str(folder / "out")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def drawn(folder: Path) -> int:
    path = folder / "drawn.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def saved(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def the_run(folder: Path) -> Path:
    runs = list((folder / "out").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_an_infinite_generator_runs_n_50_drawing_only_its_rows(server: MockModelServer, folder: Path) -> None:
    done = v1_eval(folder, "stream.toml", "-b", server.url, "-n", "50", "-c", "4", limit=50 + 4 + 1)
    assert done.returncode == 0, done.stderr
    assert drawn(folder) == 50
    lines = saved(the_run(folder))
    assert len(lines) == 50 and len(server.requests) == 50
    assert {line["example_id"] for line in lines} == {
        content_key({"question": f"q{i}", "answer": f"q{i}"[::-1]}) for i in range(50)
    }
    assert all(line["reward"] == 1.0 for line in lines)
    metadata = json.loads((the_run(folder) / "metadata.json").read_text())
    assert metadata["num_examples"] == 50 and metadata["num_rollouts"] == 50


@pytest.mark.parametrize("n", [None, "-1"])
def test_an_infinite_taskset_without_n_is_refused_in_one_line(server: MockModelServer, folder: Path, n: str | None) -> None:
    done = v1_eval(folder, "stream.toml", "-b", server.url, *(["-n", n] if n else []), limit=0)
    assert done.returncode == 2
    assert done.stderr.strip() == "v1 eval: error: stream: its taskset is infinite: pass -n N, the number of examples to draw"
    assert drawn(folder) == 0 and not (folder / "out").exists()


@pytest.mark.parametrize(
    ("env_args", "message"),
    [
        ({"seed": 3}, "shuffle: source is infinite; pass buffer=N"),
        ({"seed": 3, "buffer": 0}, "shuffle(buffer): expected a positive integer, got 0"),
        ({"head": 0}, "head(n): expected a positive integer, got 0"),
        ({"head": -1}, "head(n): expected a positive integer, got -1"),
    ],
)
def test_bad_composition_is_one_line(server: MockModelServer, folder: Path, env_args: dict[str, Any], message: str) -> None:
    done = v1_eval(folder, "stream_rows", "-b", server.url, "-n", "5", "-a", json.dumps(env_args), limit=0)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
    assert drawn(folder) == 0


def test_a_composed_module_taskset_streams(server: MockModelServer, folder: Path) -> None:
    done = v1_eval(folder, "stream_rows", "-b", server.url, "-n", "-1", "-a", '{"seed": 3, "buffer": 4, "head": 6}', limit=11)
    assert done.returncode == 0, done.stderr
    prompts = sorted(line["prompt"][-1]["content"] for line in saved(the_run(folder)))
    assert len(prompts) == 6 and prompts != [f"q{i}" for i in range(6)]
    assert drawn(folder) <= 6 + 4


def test_a_generator_that_raises_keeps_the_rollouts_before_it_and_resume_runs_the_rest(
    server: MockModelServer, folder: Path
) -> None:
    broken = v1_eval(folder, "stream.toml", "-b", server.url, "-n", "10", "-c", "2", fail_at=6)
    assert broken.returncode != 0
    assert broken.stderr.strip().splitlines()[-1] == (
        "v1 eval: error: source row 6: drawing it raised ValueError: generator broke at row 6"
    )
    run = the_run(folder)
    assert sorted(line["prompt"][-1]["content"] for line in saved(run)) == [f"q{i}" for i in range(6)]
    calls = len(server.requests)

    resumed = v1_eval(folder, "stream.toml", "-b", server.url, "-n", "10", "-c", "2", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr
    assert len(server.requests) - calls == 4
    lines = saved(run)
    assert sorted(line["prompt"][-1]["content"] for line in lines) == sorted(f"q{i}" for i in range(10))
    assert len({line["example_id"] for line in lines}) == 10
    assert json.loads((run / "metadata.json").read_text())["num_rollouts"] == 10
