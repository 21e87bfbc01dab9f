"""What v1's interception endpoint adds per request, measured the way API gateways publish it.

    python benchmarks/overhead.py [--rates 100 500 1000] [--duration 10] [--delay 0.05] [--json out.json]
    python benchmarks/overhead.py --quick        # seconds: rates 20 and 50, 0.5 s each

The upstream is the mock model server (`python -m v1.testing --delay SECONDS`) in a process of its
own: each reply waits a fixed `--delay` (an `asyncio.sleep`) before it is sent. Load is open-loop:
request i starts at `i / rate` seconds whatever earlier requests are doing, so a slow v1 shows as
latency, not as a lower rate. Each request's latency runs from its scheduled start to its end, so
time a request spent waiting for the load generator's turn counts too.

Both sides send the same Chat Completions body (`{"model", "messages"}`, plus `"stream": true`
when streaming) with the same cheap client, one shared `aiohttp.ClientSession` whose connection
limit never queues a request (an openai SDK client saturates a core at about 320 requests/s, so
it would be measured instead of v1). A plain answer is read whole and parsed; a stream is read
and each chunk parsed up to its `data: [DONE]`. For every rate, plain and then streaming, two
phases of `--duration` seconds:

- direct: the client posts to the mock itself; the request ends with the answer.
- through v1, plain: a one-call rollout of `Harness()` with the default program, the base loop,
  whose model call enters the rollout's endpoint through the in-process carrier (the path nearly
  every rollout takes) and goes upstream on v1's own client. It ends when `harness.run` returns;
  the call must be recorded on the State (one trajectory step, no error), else it failed.
- through v1, streaming: a one-call rollout of `Harness(program=fn)` whose `fn` makes the same
  streaming request with the shared client to the rollout's endpoint over loopback HTTP (base URL,
  key and model from `state.get_endpoint_config()`), read to its last chunk: the path of an
  outside agent or CLI. It too ends when `harness.run` returns, the call recorded. (v1 asks its
  upstream for the usage chunk too: one chunk more than the direct stream.)

So "through v1" includes the rollout's start and finish around the call. There is no "call only"
figure: the base loop's call cannot be timed from outside it, and the step's recorded span (its
`extras` start and end) times only v1's upstream call to the mock, not the carrier and endpoint
around it, so a difference taken from it would leave out what is measured here. That span is
shown as "v1 upstream leg" instead: what of "through v1" was the upstream call itself. Each phase
also reads the mock's request count (`GET /mock/stats`) before and after: one upstream request a
request on each side, the direct ones with no rollout running.

The added latency is through v1 minus direct at each percentile. The two sides run in separate
phases (the gateways' method: each at the full rate, alone), so requests are not paired one to
one. `--paired` runs them in one phase instead: each slot starts a direct and a through-v1
request at the same instant (taking turns to go first), so drift and load hit both alike and
the per-request differences ("added, paired") are reported too; the machine then carries twice
the rate, and v1's work also slows the direct requests sharing its event loop. The load
generator and v1 share this process and its CPU(s); the mock is pinned to a CPU of its own
(`V1_BENCH_NO_PIN=1` leaves both unpinned). Nothing asserts on timing; the process exits non-zero
if a request failed.
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

import aiohttp
from rollouts import MESSAGES, MODEL, mock_server_process, ms, percentile, run_loop

import v1

PERCENTILES = (50, 90, 99)
WARMUP_S = 0.5
DIRECT_CONNECTIONS = 10_000
"""The shared client's connection limit: high enough that its pool never queues a request."""
QUICK_RATES, QUICK_DURATION_S = [20.0, 50.0], 0.5
DONE = b"[DONE]"


@dataclass
class Phase:
    """What one side (direct or through v1) measured at one rate: per request, seconds."""

    latencies: list[float] = field(default_factory=list)
    upstream_legs: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


Request = Callable[[float, Phase], Coroutine[Any, Any, float | None]]
"""Makes one request due at a time (perf_counter seconds), records it in a Phase; its latency, None if it failed."""
Slot = Callable[[int, float], Coroutine[Any, Any, None]]
"""What the i-th slot of an open-loop schedule starts, at its due time."""


def chat_body(model: str, stream: bool) -> bytes:
    return json.dumps({"model": model, "messages": MESSAGES, **({"stream": True} if stream else {})}).encode()


async def post_chat(http: aiohttp.ClientSession, base_url: str, api_key: str, body: bytes, stream: bool) -> None:
    """One Chat Completions request: the answer read whole and parsed, or the stream's every chunk up to `[DONE]`."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"}
    async with http.post(f"{base_url}/chat/completions", data=body, headers=headers) as answer:
        if answer.status != 200:
            raise RuntimeError(f"HTTP {answer.status}: {(await answer.read())[:200]!r}")
        if not stream:
            if not json.loads(await answer.read())["choices"]:
                raise RuntimeError("an answer with no choices")
            return
        async for line in answer.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == DONE:
                return
            json.loads(data)
    raise RuntimeError("the stream ended before data: [DONE]")


def direct_request(http: aiohttp.ClientSession, url: str, stream: bool) -> Request:
    async def request(due: float, phase: Phase) -> float | None:
        phase.starts.append(time.perf_counter())
        try:
            await post_chat(http, url, "EMPTY", chat_body(MODEL, stream), stream)
        except Exception as exc:
            phase.errors.append(f"direct: {type(exc).__name__}: {exc}")
            return None
        latency = time.perf_counter() - due
        phase.latencies.append(latency)
        return latency

    return request


def through_harness(http: aiohttp.ClientSession, url: str, stream: bool) -> v1.Harness:
    """Plain: the default program (the base loop, in process). Streaming: an outside client's request over loopback HTTP."""
    client = v1.ClientConfig(api_base_url=url, max_retries=0)
    if not stream:
        return v1.Harness(client=client, model=MODEL)

    async def program(task: v1.Task, state: v1.State) -> None:
        endpoint = state.get_endpoint_config()
        body = chat_body(endpoint["model"], stream=True)
        await post_chat(http, endpoint["base_url"], endpoint["api_key"], body, stream=True)

    return v1.Harness(program=program, client=client, model=MODEL)


def through_request(harness: v1.Harness) -> Request:
    """A one-call rollout per request, its call recorded on the rollout's State."""

    async def request(due: float, phase: Phase) -> float | None:
        phase.starts.append(time.perf_counter())
        try:
            state = await harness.run({"prompt": "hello"})
        except Exception as exc:
            phase.errors.append(f"through v1: {type(exc).__name__}: {exc}")
            return None
        latency = time.perf_counter() - due
        if state["error"] is not None:
            phase.errors.append(f"through v1: {state['error']}")
            return None
        if len(state["trajectory"]) != 1:
            phase.errors.append(f"through v1: the rollout recorded {len(state['trajectory'])} steps, not 1")
            return None
        step = state["trajectory"][0]["extras"]
        phase.latencies.append(latency)
        phase.upstream_legs.append(step["end"] - step["start"])
        return latency

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
    span = max(phase.starts) - min(phase.starts) if len(phase.starts) > 1 else 0.0
    figures[f"{prefix}_rate"] = (len(phase.starts) - 1) / span if span > 0 else float("nan")
    figures[f"{prefix}_requests"] = float(count)
    figures[f"{prefix}_completed"] = float(len(phase.latencies))
    figures[f"{prefix}_errors"] = float(len(phase.errors))
    return figures


class MockCounter:
    """How many model requests the mock has received (`GET /mock/stats`)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http, self.stats_url = http, f"{url.removesuffix('/v1')}/mock/stats"

    async def received(self) -> int:
        async with self.http.get(self.stats_url) as answer:
            answer.raise_for_status()
            return int((await answer.json())["requests"])


async def run_phase(warmup: Slot, measured: Slot, rate: float, duration: float, mock: MockCounter) -> int:
    """A warm-up, then the measured load; how many requests reached the mock during the measured load."""
    await open_loop(warmup, rate, min(WARMUP_S, duration / 2))  # fills connection pools at this rate; not counted
    gc.collect()
    before = await mock.received()
    with v1.batch_gc():  # as Env.generate (v1 eval) runs its rollouts; the direct side alike
        await open_loop(measured, rate, duration)
    return await mock.received() - before


async def measure_rate(
    direct: Request, through: Request, rate: float, duration: float, pair: bool, mock: MockCounter
) -> tuple[dict[str, float], list[str]]:
    """Both sides at `rate`: in phases of their own, or with `pair` in one phase, a direct and a through request a slot."""
    direct_phase, through_phase, added = Phase(), Phase(), list[float]()
    upstream: dict[str, float] = {}
    if pair:
        warmup = paired(direct, through, (Phase(), Phase()), [])
        measured = paired(direct, through, (direct_phase, through_phase), added)
        upstream["mock_requests"] = await run_phase(warmup, measured, rate, duration, mock)
    else:
        direct_sent = await run_phase(alone(direct, Phase()), alone(direct, direct_phase), rate, duration, mock)
        through_sent = await run_phase(alone(through, Phase()), alone(through, through_phase), rate, duration, mock)
        upstream = {"direct_mock_requests": direct_sent, "through_mock_requests": through_sent}
        upstream["mock_requests"] = direct_sent + through_sent
    count = max(1, round(rate * duration))
    errors = direct_phase.errors + through_phase.errors
    expected = {"mock_requests": count * 2, "direct_mock_requests": count, "through_mock_requests": count}
    errors += [
        f"{name}: the mock received {upstream[name]}, not {expected[name]}"
        for name in upstream
        if upstream[name] != expected[name]
    ]
    figures = summarize(direct_phase, "direct", count) | summarize(through_phase, "through", count) | upstream
    for q in PERCENTILES:
        figures[f"through_upstream_leg_p{q}_ms"] = ms(percentile(through_phase.upstream_legs, q))
        figures[f"added_p{q}_ms"] = figures[f"through_p{q}_ms"] - figures[f"direct_p{q}_ms"]
        if pair:
            figures[f"paired_added_p{q}_ms"] = ms(percentile(added, q))
    return figures, errors


async def measure(url: str, rates: list[float], duration: float, pair: bool) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    # v1's waits, so that past saturation both sides show a backlog as latency, not one of them as timeouts.
    defaults = v1.ClientConfig(api_base_url=url)
    timeout = aiohttp.ClientTimeout(
        total=defaults.response_timeout, sock_connect=defaults.connect_wait, sock_read=defaults.timeout
    )
    connector = aiohttp.TCPConnector(limit=DIRECT_CONNECTIONS, limit_per_host=DIRECT_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        mock = MockCounter(http, url)
        for stream in (False, True):
            harness = through_harness(http, url, stream)
            try:
                for rate in rates:
                    mode = "stream" if stream else "plain"
                    print(f"{mode} at {rate:g} requests/s ...", file=sys.stderr, flush=True)
                    direct = direct_request(http, url, stream)
                    figures, failures = await measure_rate(direct, through_request(harness), rate, duration, pair, mock)
                    errors += failures
                    rows.append({"mode": mode, "rate": rate, **figures})
            finally:
                await harness.teardown()
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
        "v1 upstream leg",
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
            percentiles_cell(row, "through_upstream_leg"),
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
