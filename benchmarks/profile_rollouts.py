"""Where a single-turn rollout's CPU time goes: a cProfile table of the throughput run.

    python benchmarks/profile_rollouts.py [--n 1000] [--concurrency 256] [--top 30] [--sort tottime] [--dump FILE]
    python benchmarks/profile_rollouts.py --stream-calls 400    # streamed chat calls of one in-process program

Runs `--n` single-turn base-loop rollouts at `--concurrency` against the mock model server (its own
process, as in `rollouts.py`) under cProfile, and prints the functions with the most time, grouped
by the part of the stack they belong to (endpoint, upstream client, harness, asyncio/aiohttp, ...).
Profiling slows everything down about 2x; read the shares, not the absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from collections import defaultdict

from rollouts import MESSAGES, MODEL, mock_server_process

import v1

PARTS = (
    ("v1/interception/", "v1 endpoint"),
    ("v1/clients/", "v1 upstream clients"),
    ("v1/", "v1 harness, state, lifecycle"),
    ("openai/", "openai SDK"),
    ("pydantic", "pydantic"),
    ("aiohttp/", "aiohttp"),
    ("httpx", "httpx"),
    ("asyncio/", "asyncio"),
    ("json/", "json"),
)


def part_of(filename: str) -> str:
    for fragment, part in PARTS:
        if fragment in filename:
            return part
    return "other (stdlib, C calls)"


def cpu_by_part(stats: pstats.Stats) -> dict[str, float]:
    """The profiled CPU seconds (own time of each function) summed by part of the stack (`PARTS`)."""
    by_part: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        by_part[part_of(filename)] += tottime
    return dict(by_part)


async def run(url: str, n: int, concurrency: int) -> float:
    harness = v1.Harness(client=v1.ClientConfig(api_base_url=url), model=MODEL)
    limit = asyncio.Semaphore(concurrency)

    async def one() -> v1.State:
        async with limit:
            return await harness.run({"prompt": MESSAGES})

    await asyncio.gather(*(one() for _ in range(32)))  # warm pools and the endpoint
    started = time.perf_counter()
    with v1.batch_gc():  # as Env.generate (v1 eval) runs its rollouts
        states = await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    errors = sum(1 for state in states if state.get("error"))
    if errors:
        raise SystemExit(f"{errors} rollouts failed")
    return wall


async def run_streamed_calls(url: str, calls: int) -> float:
    """`calls` streamed Chat Completions calls by an in-process program through the endpoint; their wall time."""
    elapsed = 0.0

    async def program(task: v1.Task, state: v1.State) -> None:
        nonlocal elapsed
        client = state.get_client()
        started = time.perf_counter()
        for _ in range(calls):
            stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
            async for _chunk in stream:
                pass
        elapsed = time.perf_counter() - started

    harness = v1.Harness(
        program=program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL, max_turns=calls + 1
    )
    state = await harness.run({"prompt": MESSAGES})
    if state.get("error"):
        raise SystemExit(f"the streamed calls failed: {state['error']}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime", choices=("tottime", "cumulative"))
    parser.add_argument("--dump", metavar="FILE", help="also write the raw profile (for pstats / snakeviz)")
    parser.add_argument(
        "--stream-calls", type=int, default=0, metavar="N", help="profile N streamed chat calls of one program instead"
    )
    args = parser.parse_args(argv)
    with mock_server_process() as url:
        profiler = cProfile.Profile()
        profiler.enable()
        if args.stream_calls:
            wall = asyncio.run(run_streamed_calls(url, args.stream_calls))
        else:
            wall = asyncio.run(run(url, args.n, args.concurrency))
        profiler.disable()
    if args.dump:
        profiler.dump_stats(args.dump)
    stats = pstats.Stats(profiler)
    by_part = cpu_by_part(stats)
    total = sum(by_part.values())
    what = (
        f"{args.stream_calls} streamed chat calls"
        if args.stream_calls
        else f"{args.n} single-turn rollouts at concurrency {args.concurrency}"
    )
    count = args.stream_calls or args.n
    print(f"{what}: {wall:.2f} s under cProfile, {total:.2f} s of CPU profiled")
    print(f"{'part':<32} {'CPU s':>8} {'share':>7} {'ms/call' if args.stream_calls else 'ms/rollout':>11}")
    for part, seconds in sorted(by_part.items(), key=lambda item: -item[1]):
        print(f"{part:<32} {seconds:8.2f} {seconds / total:7.1%} {1000 * seconds / count:11.3f}")
    print()
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
