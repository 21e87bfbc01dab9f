"""Benchmark the Ray executor: rollouts/s on 1 vs 2 actors, the driver's cost per result, actor start-up.

    python benchmarks/ray_scaling.py [--examples 40] [--rollouts-per-example 10] [--actor-concurrency 32] [--delay 0.02]

The model is the mock server (`python -m v1.testing --reply reverse --delay 0.02`, its own
process), so a rollout is latency-bound: one 20 ms model call through the actor's interception
endpoint. The environment is `configs/reverse_text.toml`. Ray runs locally (`address="local"`),
and every actor reserves half a CPU, so on a 2-core machine two actors already share the cores
with the driver and the mock: the figures show the shape (what an actor adds, what the driver
costs), not what a cluster of real machines does. Figures:

- rollouts/s of the same eval in this process (`LocalExecutor`), and on 1 and 2 actors with
  `--actor-concurrency` rollouts in flight each (the actors started and warmed up first);
- the driver's CPU per result: CPU seconds of this process during the Ray run / rollouts
  (receiving outputs from Ray, the summary, `results.jsonl`), and the part of it that is
  writing and summarising alone (the same outputs replayed into a `ResultsWriter` + `EvalSummary`);
- per-actor start-up: seconds from asking for the actors to all of them ready (placement,
  a Python worker, importing v1 and loading the environment), and each actor's own share.

Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")


@contextlib.contextmanager
def mock_server(delay: float) -> Iterator[str]:
    command = [sys.executable, "-m", "v1.testing", "--reply", "reverse", "--delay", str(delay)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


def timed_eval(env: Any, client: Any, args: argparse.Namespace, executor: Any, folder: Path | None = None) -> dict[str, float]:
    import v1 as vf

    rollouts = args.examples * args.rollouts_per_example
    results = vf.ResultsWriter(folder) if folder is not None else None
    cpu, wall = time.process_time(), time.perf_counter()
    out = asyncio.run(
        env.evaluate(
            client,
            "mock",
            num_examples=args.examples,
            rollouts_per_example=args.rollouts_per_example,
            max_concurrent=args.actor_concurrency,
            executor=executor,
            results=results,
            keep_outputs=False,
        )
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert out["metadata"]["num_rollouts"] == rollouts and out["metadata"]["num_errors"] == 0, out["metadata"]
    return {"rollouts_per_s": rollouts / wall, "wall_s": wall, "driver_cpu_ms_per_result": 1000 * cpu / rollouts}


def writing_cost(folder: Path) -> float:
    """Milliseconds per output to append it to a results.jsonl and fold it into a summary, a group at a time."""
    import v1 as vf

    outputs = [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    with tempfile.TemporaryDirectory() as scratch:
        writer, summary = vf.ResultsWriter(scratch), vf.EvalSummary()

        async def replay() -> float:
            start = time.process_time()
            for output in outputs:
                await writer.write([output])
                summary.add(output)
            await writer.close()
            return time.process_time() - start

        return 1000 * asyncio.run(replay()) / len(outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--rollouts-per-example", type=int, default=10)
    parser.add_argument("--actor-concurrency", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.02, help="the mock's latency per call (seconds)")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(0, str(ROOT))
    import logging

    import ray

    import v1 as vf
    from v1.env import RayExecutor

    logging.getLogger("v1").setLevel(logging.ERROR)  # "no eval split" once per load
    rollouts = args.examples * args.rollouts_per_example
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other jobs share the machine)")
    print(f"{rollouts} rollouts, groups of {args.rollouts_per_example}, mock latency {args.delay * 1000:.0f} ms per call")
    with mock_server(args.delay) as url:
        client = vf.ClientConfig(api_base_url=url, max_retries=0)
        env = vf.load_environment(CONFIG)
        timed_eval(env, client, args, None)  # warm the mock and this process
        figures = {"local (this process)": timed_eval(env, client, args, None)}
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Ray's tip about accelerator variables
            ray.init(
                address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR"
            )
        print(f"ray.init (local instance): {time.perf_counter() - started:.1f} s")
        startup: dict[int, tuple[float, list[float]]] = {}
        writing = 0.0
        for actors in (1, 2):
            with RayExecutor(actors=actors, num_cpus=0.5, actor_concurrency=args.actor_concurrency) as executor:
                started = time.perf_counter()
                timed_eval(env, client, args, executor)  # starts the actors, then warms them up
                startup[actors] = (time.perf_counter() - started, executor.describe()["actor_startup_s"])
                with tempfile.TemporaryDirectory() as folder:
                    figures[f"ray, {actors} actor(s)"] = timed_eval(env, client, args, executor, Path(folder))
                    writing = writing_cost(Path(folder))
        ray.shutdown()
    print(f"\n{'executor':<22} {'rollouts/s':>10} {'wall s':>8} {'driver CPU ms/result':>21}")
    for name, figure in figures.items():
        print(
            f"{name:<22} {figure['rollouts_per_s']:>10.1f} {figure['wall_s']:>8.2f} {figure['driver_cpu_ms_per_result']:>21.3f}"
        )
    one, two = figures["ray, 1 actor(s)"]["rollouts_per_s"], figures["ray, 2 actor(s)"]["rollouts_per_s"]
    print(f"\n2 actors / 1 actor: {two / one:.2f}x")
    print(f"writing + summary alone: {writing:.3f} ms CPU per result")
    for actors, (first_run, own) in startup.items():
        print(
            f"{actors} actor(s): first run incl. start-up {first_run:.1f} s; each actor's own start-up {', '.join(f'{s:.1f}' for s in own)} s"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
