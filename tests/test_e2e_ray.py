"""Evals and trainer rollouts on Ray actors, against the mock model server over real HTTP.

One local Ray cluster serves the module (Ray start-up is slow on 2 cores); a second Ray node
joins it with `ray start --address` in a subprocess for the placement test, and is stopped by
ending that subprocess's own process group (never `ray stop`, which would stop every Ray on
the machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, arrives
from v1.cli import main
from v1.env._executors import RayExecutor, shippable_clients
from v1.testing import MockModelServer, MockRequest, Reply
from v1.train import Orchestrator
from v1.train._config import RolloutsConfig

ray = pytest.importorskip("ray")  # the [distributed] extra, pulled by [test]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")
AGGREGATES = (
    "avg_reward",
    "avg_metrics",
    "avg_error",
    "pass_at_k",
    "pass_all_k",
    "num_rollouts",
    "num_errors",
    "stop_conditions",
)
SLOW_TEXT = "hello world"  # the first row: its group goes to the first actor


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for the module; its workers import this checkout (PYTHONPATH is inherited)."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([saved] if saved else [])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Ray's tip about accelerator variables
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def server() -> Iterator[MockModelServer]:
    with MockModelServer() as mock:
        yield mock


@pytest.fixture(scope="module")
def shared(cluster: str) -> Iterator[RayExecutor]:
    """Two actors kept up between the tests that use the same environment and upstream."""
    with RayExecutor(actors=2, num_cpus=0.5) as executor:
        yield executor


@pytest.fixture
def upstream(server: MockModelServer) -> vf.ClientConfig:
    server.responder = reverser
    return vf.ClientConfig(api_base_url=server.url, max_retries=0)


def keys(outputs: Any) -> list[tuple[Any, int]]:
    return sorted((output["example_id"], output["rollout_index"]) for output in outputs)


def saved_keys(folder: Path) -> list[tuple[Any, int]]:
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted((row["example_id"], row["rollout_index"]) for row in map(json.loads, lines))


def evaluate(env: vf.Env, client: vf.ClientConfig, executor: Any = None, **kwargs: Any) -> vf.GenerateOutputs:
    kwargs.setdefault("num_examples", 6)
    kwargs.setdefault("rollouts_per_example", 2)
    return asyncio.run(env.evaluate(client, "m", executor=executor, **kwargs))


def test_ray_eval_writes_what_a_local_eval_writes(shared: RayExecutor, upstream: vf.ClientConfig, tmp_path: Path) -> None:
    env = vf.load_environment(CONFIG)
    local = evaluate(env, upstream, results=vf.ResultsWriter(tmp_path / "local"))
    remote = evaluate(env, upstream, shared, results=vf.ResultsWriter(tmp_path / "ray"))
    assert keys(remote["outputs"]) == keys(local["outputs"]) == [(e, i) for e in range(6) for i in range(2)]
    assert saved_keys(tmp_path / "ray") == saved_keys(tmp_path / "local")
    saved = json.loads((tmp_path / "ray" / "metadata.json").read_text(encoding="utf-8"))
    for field in AGGREGATES:
        assert remote["metadata"][field] == local["metadata"][field] == saved[field], field  # type: ignore[literal-required]
    assert local["metadata"]["avg_reward"] == 1.0
    assert saved["executor"]["kind"] == "ray" and saved["executor"]["actors"] == 2
    assert saved["executor"]["rerun_groups"] == 0 and len(saved["executor"]["actor_startup_s"]) == 2
    assert "executor" not in local["metadata"]


def test_resume_on_ray_runs_only_the_missing_groups_and_matches(
    shared: RayExecutor, upstream: vf.ClientConfig, server: MockModelServer, tmp_path: Path
) -> None:
    env = vf.load_environment(CONFIG)
    whole = evaluate(env, upstream, shared, results=vf.ResultsWriter(tmp_path / "whole"))
    folder = tmp_path / "cut"
    evaluate(env, upstream, shared, results=vf.ResultsWriter(folder))
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["example_id"] in (0, 1, 2)]
    (folder / "results.jsonl").write_text("".join(kept) + lines[-1][:20], encoding="utf-8")  # and a half-written line
    server.requests.clear()
    resumed = evaluate(env, upstream, shared, results=vf.ResultsWriter.resuming(folder))
    assert len(server.requests) == 6  # examples 3, 4, 5: two rollouts each, one turn
    assert saved_keys(folder) == saved_keys(tmp_path / "whole") == [(e, i) for e in range(6) for i in range(2)]
    for field in AGGREGATES:
        assert resumed["metadata"][field] == whole["metadata"][field], field  # type: ignore[literal-required]


def test_a_killed_actor_has_its_groups_rerun_on_the_other(
    cluster: str, upstream: vf.ClientConfig, server: MockModelServer, tmp_path: Path
) -> None:
    async def slow_first_row(request: MockRequest) -> Reply:
        if request.last_user_text == SLOW_TEXT:  # held until its actor is killed, however long the others take
            await arrives(lambda: killed, "the first actor to be killed")
        return Reply.text(request.last_user_text[::-1], delay=0.05)

    server.responder = slow_first_row
    env = vf.load_environment(CONFIG)
    killed: list[Any] = []
    with RayExecutor(actors=2, num_cpus=0.5, actor_concurrency=2) as executor:

        def on_progress(outputs: list[Any], summary: Any) -> None:
            if outputs and not killed:  # the first actor still holds the slow first group
                killed.append(executor.pool[0].handle)
                ray.kill(executor.pool[0].handle)

        result = evaluate(env, upstream, executor, num_examples=8, results=vf.ResultsWriter(tmp_path), on_progress=on_progress)
    assert killed
    assert keys(result["outputs"]) == saved_keys(tmp_path) == [(e, i) for e in range(8) for i in range(2)]
    info = result["metadata"]["executor"]  # type: ignore[typeddict-item]
    assert info["actors_lost"] == 1 and info["rerun_groups"] >= 1
    assert result["metadata"]["avg_reward"] == 1.0


def test_trainer_rollouts_come_from_actors_round_robin_over_endpoints(cluster: str, server: MockModelServer) -> None:
    server.responder = reverser
    with MockModelServer() as second:
        second.responder = reverser
        client = vf.ClientConfig(
            max_retries=0,
            endpoint_configs=[{"api_base_url": server.url, "max_retries": 0}, {"api_base_url": second.url, "max_retries": 0}],
        )
        env = vf.load_environment(CONFIG)
        config = RolloutsConfig(examples_per_step=4, rollouts_per_example=2, max_staleness=0, filter_zero_variance=False)
        server.requests.clear()

        async def one_batch() -> Any:
            async with Orchestrator(env, client, "m", config, executor=executor) as orchestrator:
                return await orchestrator.next_batch()

        with RayExecutor(actors=2, num_cpus=0.5) as executor:
            batch = asyncio.run(one_batch())
        assert len(batch.groups) == 4
        for group in batch.groups:
            assert [state["reward"] for state in group.states] == [1.0, 1.0]
            assert all(state["trajectory"] and state["error"] is None for state in group.states)
        assert server.requests and second.requests  # both inference servers served groups


def test_bad_input_is_one_clear_error(cluster: str, upstream: vf.ClientConfig, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(vf.ConfigError, match="actors must be at least 1"):
        RayExecutor(actors=0)
    with pytest.raises(vf.ConfigError, match="actor_concurrency must be at least 1"):
        RayExecutor(actor_concurrency=0)
    built_in_python = vf.Env(vf.Taskset(source=[{"question": "q", "answer": "a"}]))
    with RayExecutor(actors=1, num_cpus=0.5) as executor, pytest.raises(vf.ConfigError, match="built in Python"):
        evaluate(built_in_python, upstream, executor, num_examples=1, rollouts_per_example=1)
    with pytest.raises(vf.ConfigError, match="no ClientConfig"):
        shippable_clients(object())
    assert main(["eval", CONFIG, "-b", upstream.api_base_url, "-m", "m", "--ray-actors", "2"]) == 2
    assert main(["eval", CONFIG, "-b", upstream.api_base_url, "-m", "m", "--ray", "--ray-actors", "0"]) == 2
    assert main(["eval", CONFIG, "-b", upstream.api_base_url, "-m", "m", "--ray", "127.0.0.1:1", "--no-save"]) == 2
    assert main(["eval", CONFIG, "-b", upstream.api_base_url, "-m", "m", "--ray", "nowhere", "--no-save"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("v1 eval: error")]
    assert errors == [
        "v1 eval: error: --ray-actors and --ray-actor-concurrency need --ray [ADDRESS]",
        "v1 eval: error: command line: --ray-actors: Input should be greater than or equal to 1 (got 0)",
        "v1 eval: error: Ray address 127.0.0.1:1: nothing answers there (Connection refused); start a cluster with `ray start --head`",
        "v1 eval: error: Ray address 'nowhere': expected HOST:PORT, ray://HOST:PORT or auto",
    ]


def test_v1_eval_ray_against_a_cluster_address(cluster: str, upstream: vf.ClientConfig, tmp_path: Path) -> None:
    """`v1 eval --ray ADDRESS` in a subprocess joins the module's cluster, like a driver on a head node.

    One actor: it reserves a whole CPU, and the module's shared actors hold one of the cluster's two.
    """
    command = [sys.executable, "-m", "v1.cli", "eval", CONFIG, "-b", upstream.api_base_url, "-m", "m"]
    command += ["-n", "4", "-r", "2", "--output-dir", str(tmp_path), "--ray", cluster, "--ray-actors", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    (folder,) = tmp_path.iterdir()
    assert saved_keys(folder) == [(e, i) for e in range(4) for i in range(2)]
    metadata = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["avg_reward"] == 1.0 and metadata["executor"]["address"] == cluster
    assert "ray" not in metadata["eval_settings"]["settings"]  # placement is not part of the run: --resume runs locally
    assert "reward (mean)" in done.stdout and "results: " in done.stdout


@pytest.fixture
def second_node(cluster: str) -> Iterator[subprocess.Popen[str]]:
    """A second Ray node on this machine (`ray start --address`), in a process group of its own."""
    node = subprocess.Popen(
        ["ray", "start", f"--address={cluster}", "--num-cpus=1", "--block", "--disable-usage-stats"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while ray.cluster_resources().get("CPU", 0) < 3:  # the node joined and its CPU is schedulable
            assert node.poll() is None, node.stderr.read() if node.stderr else ""
            assert time.monotonic() < deadline, "the second Ray node did not join"
            time.sleep(0.2)
        yield node
    finally:
        os.killpg(node.pid, signal.SIGTERM)  # its raylet and workers share the group; other Rays are not touched
        try:
            node.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()


def test_actors_spread_over_a_second_node(
    shared: RayExecutor, second_node: subprocess.Popen[str], upstream: vf.ClientConfig
) -> None:
    """Each actor reserves a whole CPU: the head has one free (the shared actors hold the other), the new node one."""
    env = vf.load_environment(CONFIG)
    with RayExecutor(actors=2, num_cpus=1) as executor:
        result = evaluate(env, upstream, executor, num_examples=4)
    assert result["metadata"]["executor"]["nodes"] == 2  # type: ignore[typeddict-item]
    assert keys(result["outputs"]) == [(e, i) for e in range(4) for i in range(2)]


def test_v1_train_runs_its_rollout_groups_on_ray_actors(cluster: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from v1.train import train
    from v1.train._config import RaySection, TrainConfig

    recipe = TrainConfig.load(ROOT / "configs" / "train" / "tiny_first_letter.toml")
    config = recipe.model_copy(
        update={
            "output_dir": str(tmp_path),
            "max_steps": 2,
            "micro_batch_size": 8,
            "rollouts": recipe.rollouts.model_copy(
                update={"examples_per_step": 2, "rollouts_per_example": 4, "filter_zero_variance": False}
            ),
            "eval": recipe.eval.model_copy(update={"at_start": False, "at_end": False}),
            "sft": recipe.sft.model_copy(update={"warmup": False}),
            "ray": RaySection(actors=2, num_cpus=0.5),
        }
    )
    result = asyncio.run(train(config))
    assert result.steps == 2
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2] and all(line["samples"] > 0 for line in lines)
    executor = json.loads((tmp_path / "summary.json").read_text())["executor"]
    assert executor["kind"] == "ray" and executor["actors"] == 2 and executor["nodes"] == 1
    assert len(executor["actor_startup_s"]) == 2  # both actors started


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("actors = 0", "train.toml: field 'ray.actors': Input should be greater than or equal to 1"),
        ('address = "127.0.0.1:1"', "Ray address 127.0.0.1:1: nothing answers there"),
        ('address = "nowhere"', "Ray address 'nowhere': expected HOST:PORT"),
    ],
)
def test_a_bad_ray_section_in_v1_train_is_one_line_before_any_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, message: str
) -> None:
    pytest.importorskip("torch")
    recipe = (ROOT / "configs" / "train" / "tiny_first_letter.toml").read_text()
    config = tmp_path / "train.toml"
    config.write_text(
        recipe.replace('output_dir = "outputs/train/tiny_first_letter"', f'output_dir = "{tmp_path / "out"}"')
        + f"\n[ray]\n{section}\n"
    )
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()  # refused before anything was built or written
