"""What a streamed Chat Completions call through the endpoint adds: per-call paired differences, wall and CPU.

    python benchmarks/stream_latency.py [--calls 400] [--repeats 3] [--idle]

One in-process program makes rounds of three streamed calls to the mock (its own process, pinned
to its own core, as in `rollouts.py`), in an order that rotates every round:

- direct: the official SDK straight to the mock, the request the program makes;
- direct with usage: the same, asking for the usage chunk (`stream_options.include_usage`), which
  is the request the endpoint sends upstream (it records the step's token usage);
- through: the program's call through its rollout's endpoint (`state.get_client()`).

For each round it takes the differences (through - direct, through - direct with usage) of wall
time and of this process's CPU time, and prints their medians: the p50 of what one call adds,
with drift between rounds cancelled out. The difference of the separate medians is shown too.
The mock's own time is not in the CPU figures: what the wall adds beyond the CPU is waiting.
`--idle` runs on asyncio's loop (not uvloop) with a selector that times how long the loop sat
blocked waiting for a socket, and adds that per call: the waiting, measured rather than inferred.
"""

from __future__ import annotations

import argparse
import asyncio
import selectors
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from openai import AsyncOpenAI
from rollouts import MESSAGES, MODEL, mock_server_process, ms, run_loop

import v1

KINDS = ("direct", "direct_usage", "through")
WARMUP_ROUNDS = 30
T = TypeVar("T")


class BlockedTimeSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The default selector, adding up the seconds its `select` spent blocked (the loop idle, waiting for a socket)."""

    blocked = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        started = time.perf_counter()
        try:
            return super().select(timeout)  # type: ignore[no-any-return]
        finally:
            self.blocked += time.perf_counter() - started


def run_timing_idle(main: Coroutine[Any, Any, T], selector: BlockedTimeSelector) -> T:
    """Run `main` on asyncio's selector loop over `selector`."""
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selector)) as runner:
        return runner.run(main)


async def streamed_call(client: Any, usage: bool = False) -> None:
    options = {"stream_options": {"include_usage": True}} if usage else {}
    stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, **options)
    async for _chunk in stream:
        pass


async def measure(url: str, calls: int, idle: Callable[[], float] | None = None) -> dict[str, float]:
    """`calls` rounds of the three calls; the medians of each kind and of the per-round differences, in ms.

    With `idle` (seconds the loop has been blocked so far), the same for the time spent idle.
    """
    direct = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    rounds: list[dict[str, tuple[float, ...]]] = []
    blocked = idle or (lambda: 0.0)

    async def program(task: v1.Task, state: v1.State) -> None:
        through = state.get_client()
        calls_of = {
            "direct": lambda: streamed_call(direct),
            "direct_usage": lambda: streamed_call(direct, usage=True),
            "through": lambda: streamed_call(through),
        }
        for number in range(WARMUP_ROUNDS + calls):
            times: dict[str, tuple[float, ...]] = {}
            for shift in range(len(KINDS)):  # rotate the order, so no kind always runs first
                kind = KINDS[(number + shift) % len(KINDS)]
                wall, cpu, waited = time.perf_counter(), time.process_time(), blocked()
                await calls_of[kind]()
                times[kind] = (time.perf_counter() - wall, time.process_time() - cpu, blocked() - waited)
            if number >= WARMUP_ROUNDS:
                rounds.append(times)

    harness = v1.Harness(
        program=program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL, max_turns=2 * calls + 100
    )
    try:
        state = await harness.run({"prompt": MESSAGES})
    finally:
        await direct.close()
    if state.get("error"):
        raise SystemExit(f"the streamed calls failed: {state['error']}")
    figures: dict[str, float] = {}
    for index, measure_name in enumerate(("wall", "cpu", "idle") if idle else ("wall", "cpu")):
        for kind in KINDS:
            figures[f"{kind}_{measure_name}"] = ms(statistics.median(r[kind][index] for r in rounds))
        for baseline in ("direct", "direct_usage"):
            paired = statistics.median(r["through"][index] - r[baseline][index] for r in rounds)
            figures[f"added_vs_{baseline}_{measure_name}"] = ms(paired)
    return figures


ROWS = (
    ("direct_wall", "wall p50: direct"),
    ("direct_usage_wall", "wall p50: direct with usage"),
    ("through_wall", "wall p50: through the endpoint"),
    ("added_vs_direct_wall", "added wall, paired p50 (vs direct)"),
    ("added_vs_direct_usage_wall", "added wall, paired p50 (vs with usage)"),
    ("direct_cpu", "CPU p50: direct"),
    ("through_cpu", "CPU p50: through the endpoint"),
    ("added_vs_direct_cpu", "added CPU, paired p50 (vs direct)"),
    ("added_vs_direct_usage_cpu", "added CPU, paired p50 (vs with usage)"),
)
IDLE_ROWS = (
    ("direct_idle", "idle p50: direct"),
    ("direct_usage_idle", "idle p50: direct with usage"),
    ("through_idle", "idle p50: through the endpoint"),
    ("added_vs_direct_usage_idle", "added idle, paired p50 (vs with usage)"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="rounds of the three calls per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle", action="store_true", help="asyncio's loop, also timing how long it sat waiting per call")
    args = parser.parse_args(argv)
    if min(args.calls, args.repeats) < 1:
        parser.error("--calls and --repeats must be at least 1")
    runs = []
    with mock_server_process() as url:
        for _ in range(args.repeats):
            if args.idle:
                selector = BlockedTimeSelector()
                runs.append(run_timing_idle(measure(url, args.calls, partial(getattr, selector, "blocked")), selector))
            else:
                runs.append(run_loop(measure(url, args.calls)))
    print(f"{'per streamed chat call (ms)':<42}{'median':>9}   each repeat")
    for key, label in ROWS + (IDLE_ROWS if args.idle else ()):
        each = " ".join(f"{run[key]:.3f}" for run in runs)
        print(f"{label:<42}{statistics.median(run[key] for run in runs):>9.3f}   {each}")
    difference = statistics.median(run["through_wall"] - run["direct_wall"] for run in runs)
    print(f"{'added wall, difference of the p50s':<42}{difference:>9.3f}")
    print(f"medians of {args.repeats} repeats of {args.calls} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
