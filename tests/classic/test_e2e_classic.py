"""Classic environments under `v1 eval` (results, trajectories, `--resume`), `v1 view`'s API and Ray,
exactly as Taskset/Harness pairs: a module whose `load_environment(**kwargs)` returns a
SingleTurnEnv, a MultiTurnEnv subclass, a ToolEnv or an EnvGroup of them, against the mock over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from classic_reverse import WORDS, responder

import v1 as vf
from tests.tools.patience import HANG_S
from v1.cli import main
from v1.testing import MockModelServer, failing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
KINDS = ("single", "multi", "tool", "group")


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer(responder, model="mock") as server:
        yield server


@pytest.fixture
def kind_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One module per kind (`classic_single`, ...) whose `load_environment(**kwargs)` builds that kind."""
    for kind in KINDS:
        (tmp_path / f"classic_{kind}.py").write_text(
            "from classic_reverse import load_environment as build\n\n\n"
            f"def load_environment(**kwargs):\n    return build({kind!r}, **kwargs)\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def results(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def only_run(out: Path) -> Path:
    (run,) = [path for path in out.iterdir() if path.is_dir()]
    return run


@pytest.mark.parametrize("kind", KINDS)
def test_v1_eval_runs_each_classic_kind_with_results_and_resume(
    kind: str, mock: MockModelServer, kind_modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["eval", f"classic_{kind}", "-b", mock.url, "-m", "mock", "-n", "6", "-r", "2", "--output-dir", str(out)]
    assert main(args) == 0, capsys.readouterr()
    run = only_run(out)
    saved = results(run)
    metadata = json.loads((run / "metadata.json").read_text())
    assert len(saved) == 12 and metadata["num_rollouts"] == 12 and metadata["avg_reward"] == 1.0
    assert all(row["error"] is None and row["trajectory"] for row in saved)
    steps = {kind: 1, "multi": 2, "tool": 2}.get(kind)
    if steps is not None:
        assert {len(row["trajectory"]) for row in saved} == {steps}
    if kind in ("tool", "group"):
        assert any(tool["name"] == "reverse_text" for tool in metadata["tools"])
    if kind == "group":
        assert {row["info"]["env_id"] for row in saved} <= {"single", "multi", "tool"}
    # cut the run to its first three groups and a half-written line; --resume runs the rest only
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    (run / "results.jsonl").write_text("".join(lines[:6]) + lines[6][:30])
    mock.reset()
    assert main([*args, "--resume", str(run)]) == 0  # a resume repeats the command, capsys.readouterr()
    resumed = results(run)
    assert sorted((r["example_id"], r["rollout_index"]) for r in resumed) == sorted(
        (r["example_id"], r["rollout_index"]) for r in saved
    )
    calls_per_rollout = {"single": 1, "multi": 2, "tool": 2}.get(kind)
    if calls_per_rollout is not None:
        assert len(mock.requests) == 6 * calls_per_rollout
    assert json.loads((run / "metadata.json").read_text())["avg_reward"] == 1.0


def torn_down(marker: Path) -> list[int]:
    """The processes that ran `classic_torn`'s teardown, one entry per call."""
    return [int(line.rsplit(" ", 1)[1]) for line in marker.read_text().splitlines()] if marker.exists() else []


def test_v1_eval_tears_the_environment_down_once_at_the_end(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "teardown.log"
    monkeypatch.setenv("TEARDOWN_MARKER", str(marker))
    args = ["eval", "classic_torn", "-b", mock.url, "-m", "mock", "-n", "3", "-r", "2", "--output-dir", str(tmp_path / "out")]
    assert main(args) == 0, capsys.readouterr()
    assert len(mock.requests) == 6
    assert torn_down(marker) == [os.getpid()]  # once, after the rollouts
    with MockModelServer(failing(401, "bad key"), model="mock") as refusing:
        args[args.index(mock.url)] = refusing.url
        assert main(args) != 0  # the run aborts at the bad key
    assert torn_down(marker) == [os.getpid()] * 2  # and is torn down all the same


def test_v1_view_serves_a_classic_run(mock: MockModelServer, kind_modules: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["eval", "classic_tool", "-b", mock.url, "-m", "mock", "-n", "3", "-r", "1", "--output-dir", str(out)]) == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(out), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")

        def get(path: str) -> Any:
            with urllib.request.urlopen(url + path, timeout=HANG_S) as response:
                return json.loads(response.read())

        (listed,) = get("/api/runs")["runs"]
        assert listed["env"] == "classic_tool" and listed["rollouts"] == 3 and listed["status"] == "done"
        rollout = get(f"/api/rollout?id={listed['id']}&n=0")["output"]
        assert [m["role"] for m in rollout["completion"]] == ["assistant", "tool", "assistant"]
        assert rollout["reward"] == 1.0
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)


def test_bad_env_args_and_taskset_fields_are_one_clear_error(kind_modules: Path) -> None:
    with pytest.raises(vf.ConfigError, match=r"classic_single.*env_args.*not taskset fields"):
        vf.load_environment("classic_single", taskset={"system_prompt": "x"})
    assert vf.load_environment("classic_reverse", env_args={"no_such": 1}).no_such == 1  # seed: set_kwargs sets attributes
    with pytest.raises(vf.ConfigError, match="loader takes a config"):
        vf.load_environment("reverse_text", env_args={"kind": "x"})
    env = vf.load_environment("classic_reverse", env_args={"kind": "multi"}, harness={"max_turns": 3})
    assert isinstance(env, vf.MultiTurnEnv) and env.harness.config.max_turns == 3
    assert env.source is not None and env.source.env_args == {"kind": "multi"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), *([saved] if saved else [])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def test_classic_envs_on_ray_write_what_a_local_eval_writes(cluster: None, mock: MockModelServer, tmp_path: Path) -> None:
    from v1.env import RayExecutor

    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    env = vf.load_environment("classic_reverse", env_args={"kind": "group"})
    local = asyncio.run(env.evaluate(client, "m", num_examples=len(WORDS) * 3, rollouts_per_example=2))
    with RayExecutor(actors=2, num_cpus=0.5) as executor:
        remote = asyncio.run(
            env.evaluate(
                client, "m", num_examples=len(WORDS) * 3, rollouts_per_example=2, executor=executor,
                results=vf.ResultsWriter(tmp_path / "ray"),
            )
        )  # fmt: skip

    def key(output: Any) -> tuple[str, int]:
        return (output["example_id"], output["rollout_index"])

    assert sorted(map(key, remote["outputs"])) == sorted(map(key, local["outputs"]))
    assert remote["metadata"]["avg_reward"] == local["metadata"]["avg_reward"] == 1.0
    by_key = {key(o): o for o in remote["outputs"]}
    assert all(len(by_key[key(o)]["trajectory"]) == len(o["trajectory"]) for o in local["outputs"])
    assert json.loads((tmp_path / "ray" / "metadata.json").read_text())["executor"]["kind"] == "ray"


def test_ray_actors_tear_their_environments_down_when_the_executor_closes(
    cluster: None, mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from v1.env import RayExecutor

    marker = tmp_path / "teardown.log"
    monkeypatch.setenv("TEARDOWN_MARKER", str(marker))
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    env = vf.load_environment("classic_torn")
    options = {"runtime_env": {"env_vars": {"TEARDOWN_MARKER": str(marker)}}}
    with RayExecutor(actors=2, num_cpus=0.5, actor_options=options) as executor:
        result = asyncio.run(env.evaluate(client, "m", num_examples=4, rollouts_per_example=2, executor=executor))
        assert result["metadata"]["num_rollouts"] == 8
        assert torn_down(marker) == []  # not while the executor may still run rollouts
    actors = torn_down(marker)
    assert len(actors) == 2 and len(set(actors)) == 2 and os.getpid() not in actors  # each actor's own env, once


def test_v1_eval_on_a_classic_module_with_a_bad_dataset_is_one_line_and_exit_2(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "classic_bad.py").write_text(
        "import v1 as vf\n\n\ndef load_environment(**kwargs):\n    return vf.SingleTurnEnv(dataset=[{'answer': '1'}])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    assert main(["eval", "classic_bad", "-b", mock.url, "-m", "mock", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dataset row 0 has neither 'prompt' nor 'question'" in err[0]
    assert not out.exists() and not mock.requests
