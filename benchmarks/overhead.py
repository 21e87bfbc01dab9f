"""What v1's interception endpoint adds per request, measured the way API gateways publish it.

    python benchmarks/overhead.py [--rates 100 500 1000] [--duration 10] [--delay 0.05] [--json out.json]
    python benchmarks/overhead.py --quick        # seconds: rates 20 and 50, 0.5 s each

The upstream is the mock model server (`python -m v1.testing --delay SECONDS`) in a process of its
own: each reply waits a fixed `--delay` (an `asyncio.sleep`) before it is sent. Load is open-loop:
request i starts at `i / rate` seconds whatever earlier requests are doing, so a slow v1 shows as
latency, not as a lower rate. Each request's latency runs from its scheduled start to the end of
its reply (a streamed reply: its last chunk), so time a request spent waiting for the load
generator's turn counts too.

For every rate, plain and then streaming Chat Completions, two phases of `--duration` seconds:

- direct: an `AsyncOpenAI` client calls the mock, on the SDK's aiohttp transport and with v1's
  timeouts, as v1's own pools (the SDK's default pool slows down first under load, and would
  flatter v1);
- through v1: each request is a one-call rollout of `Harness(program=fn)` whose `fn` makes the
  same call with `state.get_client()`, through the rollout's interception endpoint, recorded on
  the rollout's State (a rollout whose State lacks the step counts as an error). Its latency
  includes the rollout's start before the call; "call only" is the call alone (timed inside `fn`;
  direct: from the call's actual start), which leaves out any wait for its turn.

The added latency is through v1 minus direct at each percentile. The two sides run in separate
phases (the gateways' method: each at the full rate, alone), so requests are not paired one to
one. `--paired` runs them in one phase instead: each slot starts a direct and a through-v1
request at the same instant (taking turns to go first), so drift and load hit both alike and
the per-request differences ("added, paired") are reported too; the machine then carries twice
the rate, and v1's work also slows the direct requests sharing its event loop. The load generator and v1 share this process and its CPU(s); the mock is pinned to a CPU of
its own (`V1_BENCH_NO_PIN=1` leaves both unpinned). Nothing asserts on timing; the process exits
non-zero if a request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from openai import AsyncOpenAI
from rollouts import MESSAGES, MODEL, mock_server_process, ms, percentile, run_loop

import v1
from v1.clients._http import async_http_client

PERCENTILES = (50, 90, 99)
WARMUP_S = 0.5
DIRECT_CONNECTIONS = 10_000
"""The direct client's connection limit: high enough that the load generator's pool never queues a request."""
QUICK_RATES, QUICK_DURATION_S = [20.0, 50.0], 0.5


@dataclass
class Phase:
    """What one side (direct or through v1) measured at one rate: per request, seconds."""

    latencies: list[float] = field(default_factory=list)
    call_only: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


Request = Callable[[float, Phase], Coroutine[Any, Any, float | None]]
"""Makes one request due at a time (perf_counter seconds), records it in a Phase; its latency, None if it failed."""
Slot = Callable[[int, float], Coroutine[Any, Any, None]]
"""What the i-th slot of an open-loop schedule starts, at its due time."""


async def call(client: AsyncOpenAI, stream: bool) -> None:
    """One Chat Completions call; a stream is consumed to its end."""
    reply: Any = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=stream)  # type: ignore[arg-type]
    if stream:
        async for _chunk in reply:
            pass


def direct_request(client: AsyncOpenAI, stream: bool) -> Request:
    async def request(due: float, phase: Phase) -> float | None:
        started = time.perf_counter()
        phase.starts.append(started)
        try:
            await call(client, stream)
        except Exception as exc:
            phase.errors.append(f"{type(exc).__name__}: {exc}")
            return None
        ended = time.perf_counter()
        phase.latencies.append(ended - due)
        phase.call_only.append(ended - started)
        return ended - due

    return request


def through_request(url: str, stream: bool) -> Request:
    """A one-call rollout per request; the call made by the program through the rollout's endpoint."""

    async def program(task: v1.Task, state: v1.State) -> None:
        client = state.get_client()
        started = time.perf_counter()
        state["call_started"] = started
        await call(client, stream)
        state["call_ended"] = time.perf_counter()

    harness = v1.Harness(program=program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL)

    async def request(due: float, phase: Phase) -> float | None:
        state = await harness.run({"prompt": "hello"})
        if state["error"] is not None:
            phase.errors.append(str(state["error"]))
            return None
        if len(state["trajectory"]) != 1:
            phase.errors.append(f"the rollout recorded {len(state['trajectory'])} steps, not 1")
            return None
        phase.starts.append(state["call_started"])
        phase.latencies.append(state["call_ended"] - due)
        phase.call_only.append(state["call_ended"] - state["call_started"])
        return state["call_ended"] - due  # type: ignore[no-any-return]

    return request


async def open_loop(slot: Slot, rate: float, duration: float) -> None:
    """Start `rate * duration` slots on a fixed schedule, whether or not earlier ones are done; wait for all."""
    first = time.perf_counter() + 0.01
    tasks: list[asyncio.Task[None]] = []
    for i in range(max(1, round(rate * duration))):
        due = first + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(slot(i, due)))
    await asyncio.gather(*tasks)


def alone(request: Request, phase: Phase) -> Slot:
    async def slot(i: int, due: float) -> None:
        await request(due, phase)

    return slot


def paired(direct: Request, through: Request, phases: tuple[Phase, Phase], added: list[float]) -> Slot:
    """Each slot: a direct and a through-v1 request due at once (taking turns to start first); their difference."""

    async def slot(i: int, due: float) -> None:
        sides = (direct(due, phases[0]), through(due, phases[1]))
        latencies = await asyncio.gather(*(sides if i % 2 else sides[::-1]))
        direct_s, through_s = latencies if i % 2 else latencies[::-1]
        if direct_s is not None and through_s is not None:
            added.append(through_s - direct_s)

    return slot


def summarize(phase: Phase, prefix: str, count: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for q in PERCENTILES:
        figures[f"{prefix}_p{q}_ms"] = ms(percentile(phase.latencies, q))
    for q in PERCENTILES:
        figures[f"{prefix}_call_only_p{q}_ms"] = ms(percentile(phase.call_only, q))
    span = max(phase.starts) - min(phase.starts) if len(phase.starts) > 1 else 0.0
    figures[f"{prefix}_rate"] = (len(phase.starts) - 1) / span if span > 0 else float("nan")
    figures[f"{prefix}_requests"] = float(count)
    figures[f"{prefix}_completed"] = float(len(phase.latencies))
    figures[f"{prefix}_errors"] = float(len(phase.errors))
    return figures


async def run_phase(warmup: Slot, measured: Slot, rate: float, duration: float) -> None:
    await open_loop(warmup, rate, min(WARMUP_S, duration / 2))  # fills connection pools at this rate; not counted
    gc.collect()
    with v1.batch_gc():  # as Env.generate (v1 eval) runs its rollouts; the direct side alike
        await open_loop(measured, rate, duration)


async def measure_rate(
    direct: Request, through: Request, rate: float, duration: float, pair: bool
) -> tuple[dict[str, float], list[str]]:
    """Both sides at `rate`: in phases of their own, or with `pair` in one phase, a direct and a through request a slot."""
    direct_phase, through_phase, added = Phase(), Phase(), list[float]()
    if pair:
        warmup = paired(direct, through, (Phase(), Phase()), [])
        await run_phase(warmup, paired(direct, through, (direct_phase, through_phase), added), rate, duration)
    else:
        await run_phase(alone(direct, Phase()), alone(direct, direct_phase), rate, duration)
        await run_phase(alone(through, Phase()), alone(through, through_phase), rate, duration)
    count = max(1, round(rate * duration))
    figures = summarize(direct_phase, "direct", count) | summarize(through_phase, "through", count)
    for q in PERCENTILES:
        figures[f"added_p{q}_ms"] = figures[f"through_p{q}_ms"] - figures[f"direct_p{q}_ms"]
        figures[f"added_call_only_p{q}_ms"] = figures[f"through_call_only_p{q}_ms"] - figures[f"direct_call_only_p{q}_ms"]
        if pair:
            figures[f"paired_added_p{q}_ms"] = ms(percentile(added, q))
    return figures, direct_phase.errors + through_phase.errors


async def measure(url: str, rates: list[float], duration: float, pair: bool) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    # The transport v1's own pools use (the SDK's aiohttp one where it has it): the SDK's default pool is
    # slower under load than v1's path, which would hide what the endpoint adds. v1's waits, so that past
    # saturation both sides show a backlog as latency, not one of them as timeouts.
    defaults = v1.ClientConfig()
    pool = async_http_client(
        timeout=defaults.timeout,
        connect_timeout=defaults.connect_wait,
        max_connections=DIRECT_CONNECTIONS,
        max_keepalive_connections=DIRECT_CONNECTIONS,
    )
    direct_client = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, http_client=pool)
    try:
        for stream in (False, True):
            through = through_request(url, stream)
            for rate in rates:
                mode = "stream" if stream else "plain"
                print(f"{mode} at {rate:g} requests/s ...", file=sys.stderr, flush=True)
                figures, failures = await measure_rate(direct_request(direct_client, stream), through, rate, duration, pair)
                errors += failures
                rows.append({"mode": mode, "rate": rate, **figures})
    finally:
        await direct_client.close()
    return rows, errors


# -- report -----------------------------------------------------------------------------------


def percentiles_cell(row: dict[str, Any], prefix: str) -> str:
    return " / ".join(f"{row[f'{prefix}_p{q}_ms']:.2f}" for q in PERCENTILES)


def print_report(rows: list[dict[str, Any]], delay: float, duration: float, pair: bool) -> None:
    how = "both sides in one phase, a request each a slot" if pair else "each side in a phase of its own"
    print(
        f"v1 interception overhead: upstream fixed at {ms(delay):g} ms, open-loop, {duration:g} s per rate ({how}); "
        "latency in ms, p50 / p90 / p99"
    )
    columns: tuple[str, ...] = (
        "mode",
        "rate/s",
        "direct",
        "through v1",
        "added",
        "added, call only",
        "achieved/s direct, v1",
        "errors",
    )
    columns += ("added, paired",) if pair else ()
    table = [
        (
            row["mode"],
            f"{row['rate']:g}",
            percentiles_cell(row, "direct"),
            percentiles_cell(row, "through"),
            percentiles_cell(row, "added"),
            percentiles_cell(row, "added_call_only"),
            f"{row['direct_rate']:.0f}, {row['through_rate']:.0f}",
            f"{row['direct_errors']:.0f}, {row['through_errors']:.0f}",
            *((percentiles_cell(row, "paired_added"),) if pair else ()),
        )
        for row in rows
    ]
    widths = [max(len(column), *(len(line[i]) for line in table)) for i, column in enumerate(columns)]
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths)))
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))


def positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates", type=positive, nargs="+", default=[100.0, 500.0, 1000.0], help="requests/s (default 100 500 1000)"
    )
    parser.add_argument("--duration", type=positive, default=10.0, help="seconds per rate and side (default 10)")
    parser.add_argument("--delay", type=positive, default=0.05, help="the upstream's fixed latency in seconds (default 0.05)")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="both sides in one phase: each slot starts a direct and a through-v1 request at once (the machine carries "
        "twice the rate), and the per-request differences are reported too",
    )
    parser.add_argument("--quick", action="store_true", help="rates 20 and 50, 0.5 s each: a check that it runs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    if args.quick:
        args.rates, args.duration = QUICK_RATES, QUICK_DURATION_S
    if any(rate * args.duration > 1_000_000 for rate in args.rates):
        parser.error("--rates x --duration must stay within 1,000,000 requests a phase")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with mock_server_process(mock_args=["--delay", str(args.delay)]) as url:
        rows, errors = run_loop(measure(url, args.rates, args.duration, args.paired))
    print_report(rows, args.delay, args.duration, args.paired)
    if errors:
        print(f"{len(errors)} request(s) failed; first: {errors[0]}", file=sys.stderr)
    if args.json:
        report = {
            "config": {"rates": args.rates, "duration_s": args.duration, "upstream_delay_s": args.delay, "paired": args.paired},
            "environment": {"python": platform.python_version(), "platform": platform.platform()},
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
