"""The rollouts `compare_commits.py` times: one commit's v1, run in a fresh process.

    PYTHONPATH=WORKTREE python benchmarks/commit_driver.py --url URL [--n 1000] [--concurrency 256] [--tool-loop] [--profile FILE]

Runs `--n` rollouts at `--concurrency` against the mock model server at `--url` and prints one
JSON line: rollouts/s, CPU ms per rollout of this process (`resource.getrusage`, user + system),
errors, and which `v1` it imported. Single-turn by default; `--tool-loop` gives each rollout a
Python tool (`add`), so two model calls (the mock must answer with `--reply tool-call`);
`--no-call` runs a program that calls no model (a rollout's own cost: state, endpoint session,
scoring, finalize).
`--profile FILE` runs the timed rollouts under cProfile and writes the profile to FILE. `--gate`
waits for a line on stdin before and after the timed rollouts, saying `READY` and `DONE` on stdout
first: `instructions.py` switches callgrind's counting on and off there.

It imports only the standard library and the API every measured commit shares (`v1.Harness`,
`v1.ClientConfig`, `v1.Toolset`, `v1.batch_gc`, `Harness.run`), so it runs the commit of
8f7056d as well as today's. The event loop is uvloop where installed (unless `V1_UVLOOP=0`), as
`v1 eval` runs it, built here rather than by v1's private runner, which moved between commits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import v1

MODEL = "m"
WARMUP = 32


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def no_call(task: Any, state: Any) -> None:
    """A program that calls no model: what is left of a rollout is the framework's own lifecycle."""
    state["completion"] = []


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def system_seconds() -> float:
    """The kernel's share of `cpu_seconds` (system calls: the sockets and the event loop's polling)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


async def timed(units: Callable[[], Awaitable[list[bool]]], n: int) -> dict[str, Any]:
    """Run the `n` units `units()` starts (each answering whether it succeeded): the figures both drivers print."""
    started, cpu_started, system_started = time.perf_counter(), cpu_seconds(), system_seconds()
    results = await units()
    wall, cpu, system = time.perf_counter() - started, cpu_seconds() - cpu_started, system_seconds() - system_started
    return {
        "rollouts_per_s": n / wall,
        "cpu_ms_per_rollout": 1000 * cpu / n,
        "system_ms_per_rollout": 1000 * system / n,
        "wall_s": wall,
        "errors": results.count(False),
    }


async def gate(word: str) -> None:
    """Say `word` on stdout and wait for a line on stdin (`instructions.py` switches callgrind's counting then)."""
    print(word, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def warmed_and_timed(one: Callable[[], Awaitable[bool]], n: int, gated: bool) -> dict[str, Any]:
    """`min(WARMUP, n)` units of `one` not counted, then `n` timed (`timed`), `--gate`'s stops around them."""
    await asyncio.gather(*(one() for _ in range(min(WARMUP, n))))
    if gated:
        await gate("READY")
    figures = await timed(lambda: asyncio.gather(*(one() for _ in range(n))), n)
    if gated:
        await gate("DONE")
    return figures


async def rollouts(
    url: str,
    n: int,
    concurrency: int,
    tool_loop: bool,
    profiler: cProfile.Profile | None,
    gated: bool = False,
    calls: bool = True,
) -> dict[str, Any]:
    toolsets = [v1.Toolset([add])] if tool_loop else []
    program: dict[str, Any] = {} if calls else {"program": no_call}
    harness = v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL, toolsets=toolsets, **program)
    limit = asyncio.Semaphore(concurrency)

    async def one() -> bool:
        async with limit:
            state = await harness.run({"prompt": "hello"})
        if state["error"] is not None:
            return False
        # The mock's tool-call responder calls add(a=1, b=1), then answers with the tool's result.
        return not tool_loop or state["completion"][-1]["content"] == "2"

    await asyncio.gather(*(one() for _ in range(min(WARMUP, n))))  # warms pools and the endpoint; not counted
    if gated:
        await gate("READY")
    with profiler or contextlib.nullcontext(), v1.batch_gc():  # as Env.generate (v1 eval) runs its rollouts
        figures = await timed(lambda: asyncio.gather(*(one() for _ in range(n))), n)
    if gated:
        await gate("DONE")
    await harness.teardown()
    return figures | {"v1_file": v1.__file__}


def plain_main(
    doc: str, units: Callable[[str, int, int, bool], Coroutine[Any, Any, dict[str, Any]]], what: str, argv: list[str] | None
) -> int:
    """The command line of a driver with `--url`, `--n`, `--concurrency` and `--gate` only (`raw_driver.py`,
    `floor_driver.py`): runs `units(url, n, concurrency, gated)` and prints its figures as one JSON line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--url", required=True, help="the mock model server's base URL")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--gate", action="store_true", help=f"wait for a stdin line before and after the timed {what}")
    args = parser.parse_args(argv)
    if args.n < 1 or args.concurrency < 1:
        parser.error("--n and --concurrency must be at least 1")
    print(json.dumps(run_loop(units(args.url, args.n, args.concurrency, args.gate))))
    return 0


def run_loop(main: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    runner_class = getattr(asyncio, "Runner", None)  # Python 3.11+
    if runner_class is None or os.environ.get("V1_UVLOOP", "1") == "0" or importlib.util.find_spec("uvloop") is None:
        return asyncio.run(main)
    import uvloop

    with runner_class(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the mock model server's base URL")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--tool-loop", action="store_true")
    parser.add_argument("--no-call", action="store_true", help="a program that calls no model")
    parser.add_argument("--profile", metavar="FILE")
    parser.add_argument("--gate", action="store_true", help="wait for a stdin line before and after the timed rollouts")
    args = parser.parse_args(argv)
    if args.n < 1 or args.concurrency < 1:
        parser.error("--n and --concurrency must be at least 1")
    profiler = cProfile.Profile() if args.profile else None
    figures = run_loop(rollouts(args.url, args.n, args.concurrency, args.tool_loop, profiler, args.gate, not args.no_call))
    if profiler is not None:
        profiler.dump_stats(args.profile)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
