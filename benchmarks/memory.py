"""Memory of a long eval: the RSS curve over 100k single-turn rollouts, and the cost per rollout in flight.

    python benchmarks/memory.py [--n 100000] [--concurrency 256] [--points 10] [--json out.json]
    python benchmarks/memory.py --streams-only [--taskset-rows 100000] [--stream-n 200]

`Env.generate` runs `--n` single-turn base-loop rollouts (one per row) against the mock model
server in its own process, streaming outputs to a run folder (`ResultsWriter`, as `v1 eval
--save` does) with `keep_outputs=False`, so nothing keeps finished results in memory. The
current RSS (not the peak) is printed `--points` times along the way: a flat curve means
memory is O(rollouts in flight), a rising one means something keeps per-rollout data. First,
the plan's own cost per row is measured with tracemalloc (ids and positions for ordering and
resume; the tasks are built when their group is scheduled). Then,
to price a rollout in flight, `--concurrency` rollouts are held open at once (each program
waits on an event after its model call) and the RSS grown is divided by their number.

Last, a stream eval against a list: `Env.evaluate(num_examples=--stream-n)` of a taskset whose
source is a list of `--taskset-rows` rows of about 1 KiB (loaded whole, as a list source is,
to run a few), then of an infinite generator of the same rows (drawn as the run takes them);
the peak of Python's allocations (tracemalloc) during each is printed, with the rows drawn.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollouts import MODEL, mock_server_process

import v1
from v1.env import ResultsWriter


def rss_mib() -> float:
    """The current resident set size of this process."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / (1024 * 1024)


def rows(n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"prompt": f"hello {i}", "example_id": i}


async def curve(url: str, n: int, concurrency: int, points: int, folder: Path) -> list[tuple[int, float, float]]:
    env = v1.Env(taskset=v1.Taskset(), harness=v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL))
    done = 0
    step = max(1, n // points)
    start = time.perf_counter()
    samples: list[tuple[int, float, float]] = [(0, 0.0, rss_mib())]

    def progress(outputs: list[v1.RolloutOutput], summary: v1.EvalSummary) -> None:
        nonlocal done
        before = done
        done += len(outputs)
        if done // step != before // step:
            samples.append((done, time.perf_counter() - start, rss_mib()))
            print(f"  {done:>7} rollouts  {samples[-1][1]:7.1f} s  RSS {samples[-1][2]:6.1f} MiB", file=sys.stderr, flush=True)

    out = await env.generate(
        rows(n), max_concurrent=concurrency, results=ResultsWriter(folder), keep_outputs=False, on_progress=progress
    )
    if out["outputs"]:
        raise SystemExit("keep_outputs=False returned outputs")
    return samples


async def in_flight_cost(url: str, concurrency: int) -> float:
    """MiB per rollout held open at once (after its model call), from the RSS grown by `concurrency` of them."""
    release, all_held = asyncio.Event(), asyncio.Event()
    arrived = 0

    async def program(task: v1.Task, state: v1.State) -> None:
        nonlocal arrived
        await state.get_client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        arrived += 1
        if arrived == concurrency:
            all_held.set()
        await release.wait()

    harness = v1.Harness(program=program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL)
    release.set()
    await asyncio.gather(*(harness.run({"prompt": "warm"}) for _ in range(32)))  # pools, endpoint, first allocations
    release.clear()
    arrived = 0
    gc.collect()
    before = rss_mib()
    runs = [asyncio.ensure_future(harness.run({"prompt": f"x {i}"})) for i in range(concurrency)]
    await all_held.wait()
    held = rss_mib()
    release.set()
    await asyncio.gather(*runs)
    return (held - before) / concurrency


def plan_cost(n: int) -> tuple[float, float]:
    """Bytes per row held by `Env.generate`'s plan of `n` rows (tracemalloc), beyond the rows themselves; and for a generator."""
    import tracemalloc

    from v1.env._scheduling import plan_units

    rows = [{"prompt": f"question {i}", "answer": str(i)} for i in range(n)]
    figures = []
    for inputs in (lambda: rows, lambda: iter(rows)):
        tracemalloc.start()
        plan = plan_units(inputs(), v1.Task, 1, False)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        figures.append(held / n)
        del plan
    return figures[0], figures[1]


def big_row(i: int) -> dict[str, Any]:
    return {"prompt": f"question {i}", "answer": str(i), "info": {"context": f"{i:08d}" * 128}}


async def eval_peak(url: str, taskset: v1.Taskset, n: int) -> float:
    """The peak MiB Python allocated while `Env.evaluate` ran `n` examples of `taskset` (the rows loaded included)."""
    import tracemalloc

    env = v1.Env(taskset=taskset, harness=v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL))
    gc.collect()
    tracemalloc.start()
    result = await env.evaluate(num_examples=n, max_concurrent=32, keep_outputs=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    if result["metadata"]["num_rollouts"] != n:
        raise SystemExit(f"ran {result['metadata']['num_rollouts']} rollouts, expected {n}")
    return peak / (1024 * 1024)


def stream_against_list(url: str, rows: int, n: int) -> dict[str, float]:
    drawn = 0

    def listed() -> list[dict[str, Any]]:
        return [big_row(i) for i in range(rows)]

    def endless() -> Iterator[dict[str, Any]]:
        nonlocal drawn
        for i in itertools.count():
            drawn += 1
            yield big_row(i)

    figures = {
        "list_peak_mib": asyncio.run(eval_peak(url, v1.Taskset(source=listed), n)),
        "stream_peak_mib": asyncio.run(eval_peak(url, v1.Taskset(source=endless, infinite=True), n)),
    }
    print(f"eval of {n} examples, peak Python allocations (tracemalloc):")
    print(f"  list source of {rows} rows (~1 KiB each), loaded whole: {figures['list_peak_mib']:8.1f} MiB")
    print(f"  infinite generator of the same rows, {drawn} drawn:  {figures['stream_peak_mib']:8.1f} MiB")
    figures["stream_rows_drawn"] = drawn
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--points", type=int, default=10)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--taskset-rows", type=int, default=100_000, help="rows of the list taskset the stream is set against")
    parser.add_argument("--stream-n", type=int, default=200, help="examples each of the two evals runs")
    parser.add_argument("--streams-only", action="store_true", help="only the stream eval against the list")
    args = parser.parse_args(argv)
    if min(args.n, args.concurrency, args.points, args.taskset_rows, args.stream_n) < 1:
        parser.error("--n, --concurrency, --points, --taskset-rows and --stream-n must be at least 1")
    if args.streams_only:
        with mock_server_process() as url:
            figures = stream_against_list(url, args.taskset_rows, args.stream_n)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(figures, f)
        return 0
    indexed, generated = plan_cost(args.n)
    print(
        f"plan of {args.n} rows: {indexed:.0f} bytes per row from a list or Dataset, {generated:.0f} from a generator (tasks kept)"
    )
    with mock_server_process() as url, tempfile.TemporaryDirectory() as tmp:
        per_rollout = asyncio.run(in_flight_cost(url, args.concurrency))
        print(f"memory per rollout in flight (program waiting after its call): {per_rollout * 1024:.1f} KiB", flush=True)
        print(f"RSS over {args.n} rollouts at concurrency {args.concurrency} (outputs streamed to disk):", flush=True)
        samples = asyncio.run(curve(url, args.n, args.concurrency, args.points, Path(tmp) / "run"))
        streams = stream_against_list(url, args.taskset_rows, args.stream_n)
    print(f"{'rollouts':>9} {'seconds':>8} {'RSS MiB':>8}")
    for done, seconds, rss in samples:
        print(f"{done:>9} {seconds:>8.1f} {rss:>8.1f}")
    first_full = samples[1] if len(samples) > 1 else samples[0]
    growth = (samples[-1][2] - first_full[2]) / max(1, samples[-1][0] - first_full[0]) * 1024 * 1024
    print(f"RSS growth after the first {first_full[0]} rollouts: {growth:.0f} bytes per rollout")
    if args.json:
        with open(args.json, "w") as f:
            figures = {"per_rollout_in_flight_kib": per_rollout * 1024, "curve": samples, "growth_bytes_per_rollout": growth}
            json.dump({**figures, "streams": streams}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
