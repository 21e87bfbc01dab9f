"""Benchmark v1's interception endpoint: added latency per model call, and rollout throughput.

    python benchmarks/rollouts.py [--n 1000] [--concurrency 256] [--direct-calls 300] [--repeats 3] [--json out.json]

The mock model server (`python -m v1.testing --port 0`) runs as a separate
process, so its CPU time is not charged to the benchmark's event loop. Each
repeat runs on a fresh event loop (so a fresh endpoint and fresh pooled
clients) and measures:

1. latency, sequentially and interleaved call by call (so drift hits both sides alike):
   - direct: one `AsyncOpenAI.chat.completions.create` straight to the mock;
   - through the endpoint: a one-call rollout of `Harness(program=fn)` where `fn`
     times just its `state.get_client().chat.completions.create(...)`;
     the median of the per-pair differences is what the endpoint adds per model call
     (program SDK -> endpoint handler -> upstream wire -> mock);
   - the whole `harness.run` of that rollout;
2. throughput: `--n` single-turn base-loop rollouts at `--concurrency`;
3. per dialect (Chat Completions, Completions, Responses, Anthropic Messages), plain and
   streaming: the same SDK call made straight to the mock (speaking that dialect) and through
   the endpoint (upstream: `openai_chat_completions`), interleaved; streamed calls are timed
   until the stream is consumed, each side going first every other pair. The median of the
   pairs' differences is what the endpoint adds in that dialect.

Figures are printed per repeat and as the median across repeats. Nothing here
asserts on timing; the process exits non-zero only if a rollout failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

import v1
import v1._util.loop_scope
from v1.clients._http import async_http_client

# v1's loop runner: uvloop when installed, unless V1_UVLOOP=0 (as `v1 eval` runs).
run_loop = v1._util.loop_scope.run
MODEL = "m"
MESSAGES = [{"role": "user", "content": "hello"}]
WARMUP_CALLS = 30
THROUGHPUT_WARMUP = 32


# -- mock server process ----------------------------------------------------------------------


def pin_mock(pid: int) -> str:
    """Pin the mock to the last CPU and this process to the others (when there are several), so the
    mock's work is not charged to v1's event loop; returns how they were placed."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2 or os.environ.get("V1_BENCH_NO_PIN"):
        return "not pinned"
    os.sched_setaffinity(pid, {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))
    return f"mock on CPU {cpus[-1]}, benchmark on CPU(s) {','.join(map(str, cpus[:-1]))}"


def env_with_path_first(folder: Path) -> dict[str, str]:
    """This process's environment with `folder` first on PYTHONPATH (so a child imports its `v1`)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def stop_process(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    """SIGTERM `proc` if it still runs, then SIGKILL past `grace` seconds; always reaped."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def mock_server_process(startup_timeout: float = 30.0, mock_args: Sequence[str] = ()) -> Iterator[str]:
    """Run `python -m v1.testing --port 0 [mock_args...]` and yield its base URL; always terminate it.

    `mock_args` are more of its flags (e.g. ``--delay 0.05``, ``--reply tool-call``). The mock is pinned to a CPU of its own (`pin_mock`; `V1_BENCH_NO_PIN=1` leaves both unpinned).
    """
    # The server's stderr goes to a file, shown only if it fails to start: when the benchmark
    # is interrupted mid-request, aiohttp logs every dropped connection there.
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "v1.testing", "--port", "0", *mock_args],
        stdout=subprocess.PIPE,
        stderr=errors,
        stdin=subprocess.DEVNULL,
        text=True,
        # Own process group: a terminal Ctrl-C reaches only us, and we stop the server ourselves.
        start_new_session=True,
    )
    try:
        print(pin_mock(proc.pid), file=sys.stderr, flush=True)
        try:
            url = _read_url(proc, startup_timeout)
        except RuntimeError as exc:
            errors.seek(0)
            raise RuntimeError(f"{exc}\n{errors.read()[-2000:]}") from None
        yield url
    finally:
        stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        errors.close()


def _read_url(proc: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise RuntimeError(f"mock server printed no URL within {timeout}s")
    line = proc.stdout.readline().strip()
    if not line.startswith("http"):
        raise RuntimeError(f"mock server did not start (exit code {proc.poll()}, first line {line!r})")
    return line


# -- statistics -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ms(seconds: float) -> float:
    return seconds * 1000.0


def peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# -- measurements -----------------------------------------------------------------------------


async def timed_program(task: v1.Task, state: v1.State) -> None:
    """One model call through the rollout's endpoint; only the call itself is timed."""
    client = state.get_client()
    start = time.perf_counter()
    await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    state["call_s"] = time.perf_counter() - start


async def measure_latency(url: str, calls: int) -> dict[str, float]:
    direct_client = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    # The same call over the transport v1's own pools use (the SDK's aiohttp one where it has it),
    # so the added latency is also reported against a baseline that can't flatter v1.
    same_transport_client = AsyncOpenAI(
        base_url=url,
        api_key="EMPTY",
        max_retries=0,
        http_client=async_http_client(timeout=60.0, connect_timeout=10.0, max_connections=64, max_keepalive_connections=64),
    )
    harness = v1.Harness(program=timed_program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL)

    async def direct_call(client: AsyncOpenAI = direct_client) -> float:
        start = time.perf_counter()
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
        return time.perf_counter() - start

    async def rollout() -> tuple[float, float]:
        start = time.perf_counter()
        state = await harness.run({"prompt": "hello"})
        elapsed = time.perf_counter() - start
        if state["error"] is not None:
            raise RuntimeError(f"latency rollout failed: {state['error']}")
        return state["call_s"], elapsed

    try:
        for _ in range(WARMUP_CALLS):
            await direct_call()
            await direct_call(same_transport_client)
            await rollout()
        direct, same_transport, through, runs = [], [], [], []
        for _ in range(calls):
            direct.append(await direct_call())
            same_transport.append(await direct_call(same_transport_client))
            call_s, run_s = await rollout()
            through.append(call_s)
            runs.append(run_s)
    finally:
        await direct_client.close()
        await same_transport_client.close()
    direct_p50, through_p50 = statistics.median(direct), statistics.median(through)
    same_p50 = statistics.median(same_transport)
    return {
        "direct_p50_ms": ms(direct_p50),
        "direct_p99_ms": ms(percentile(direct, 99)),
        "endpoint_p50_ms": ms(through_p50),
        "endpoint_p99_ms": ms(percentile(through, 99)),
        "added_p50_ms": ms(statistics.median(t - d for t, d in zip(through, direct))),
        "direct_same_transport_p50_ms": ms(same_p50),
        "added_vs_same_transport_p50_ms": ms(statistics.median(t - d for t, d in zip(through, same_transport))),
        "run_p50_ms": ms(statistics.median(runs)),
        "run_p99_ms": ms(percentile(runs, 99)),
    }


async def measure_throughput(url: str, n: int, concurrency: int, tune_gc: bool = True) -> tuple[dict[str, float], list[Any]]:
    harness = v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL)
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one() -> v1.State:
        async with semaphore:
            start = time.perf_counter()
            state = await harness.run({"prompt": "hello"})
            latencies.append(time.perf_counter() - start)
            return state

    # Warm the upstream connection pool a little; not counted.
    await asyncio.gather(*(harness.run({"prompt": "hello"}) for _ in range(min(THROUGHPUT_WARMUP, concurrency))))
    start, cpu_start = time.perf_counter(), time.process_time()
    with v1.batch_gc() if tune_gc else contextlib.nullcontext():  # as Env.generate (v1 eval) runs its rollouts
        states = await asyncio.gather(*(one() for _ in range(n)))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    errors = [state["error"] for state in states if state["error"] is not None]
    figures = {
        "rollouts_per_s": n / wall,
        "wall_s": wall,
        "cpu_ms_per_rollout": ms(cpu / n),
        "rollout_p50_ms": ms(statistics.median(latencies)),
        "rollout_p99_ms": ms(percentile(latencies, 99)),
        "errors": float(len(errors)),
    }
    return figures, errors


DIALECTS = ("chat_completions", "completions", "responses", "messages")


async def dialect_call(client: Any, dialect: str, stream: bool) -> float:
    """One call in `dialect` (consuming the whole stream when streaming); its duration in seconds."""
    start = time.perf_counter()
    if dialect == "chat_completions":
        result = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=stream)
    elif dialect == "completions":
        result = await client.completions.create(model=MODEL, prompt="hello", stream=stream)
    elif dialect == "responses":
        result = await client.responses.create(model=MODEL, input="hello", stream=stream)
    else:
        result = await client.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, stream=stream)
    if stream:
        async for _ in result:
            pass
    return time.perf_counter() - start


async def measure_dialects(url: str, calls: int) -> dict[str, float]:
    """Added latency per call for each dialect, plain and streaming: the median of `calls` pairs' differences."""
    from anthropic import AsyncAnthropic  # imported here: its ~40 MiB would otherwise count in every peak RSS

    figures: dict[str, float] = {}
    direct_openai = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    direct_anthropic = AsyncAnthropic(base_url=url.removesuffix("/v1"), api_key="EMPTY", max_retries=0)
    cells = [(dialect, stream) for dialect in DIALECTS for stream in (False, True)]

    async def program(task: v1.Task, state: v1.State) -> None:
        for dialect, stream in cells:
            through_client = state.get_client(dialect)
            direct_client = direct_anthropic if dialect == "messages" else direct_openai
            added = []
            for i in range(WARMUP_CALLS // 3 + calls):
                if i % 2:  # take turns going first
                    t = await dialect_call(through_client, dialect, stream)
                    d = await dialect_call(direct_client, dialect, stream)
                else:
                    d = await dialect_call(direct_client, dialect, stream)
                    t = await dialect_call(through_client, dialect, stream)
                if i >= WARMUP_CALLS // 3:
                    added.append(t - d)
            kind = "stream" if stream else "plain"
            figures[f"{dialect}_{kind}_added_p50_ms"] = ms(statistics.median(added))

    harness = v1.Harness(
        program=program,
        client=v1.ClientConfig(api_base_url=url, max_retries=0),
        model=MODEL,
        max_turns=len(cells) * (WARMUP_CALLS + calls),
    )
    try:
        state = await harness.run({"prompt": "hello"})
    finally:
        await direct_openai.close()
        await direct_anthropic.close()
    if state["error"] is not None:
        raise RuntimeError(f"dialect benchmark failed: {state['error']}")
    return figures


async def one_repeat(url: str, args: argparse.Namespace) -> tuple[dict[str, float], list[Any]]:
    figures = await measure_latency(url, args.direct_calls)
    gc.collect()
    if args.dialect_calls:
        figures.update(await measure_dialects(url, args.dialect_calls))
    gc.collect()
    throughput, errors = await measure_throughput(url, args.n, args.concurrency, tune_gc=not args.default_gc)
    figures.update(throughput)
    figures["peak_rss_mib"] = peak_rss_mib()
    return figures, errors


# -- report -----------------------------------------------------------------------------------

ROWS: list[tuple[str, str, str]] = [
    # key, label, format
    ("direct_p50_ms", "direct call p50 (ms)", ".3f"),
    ("direct_p99_ms", "direct call p99 (ms)", ".3f"),
    ("direct_same_transport_p50_ms", "direct call, v1's transport, p50 (ms)", ".3f"),
    ("endpoint_p50_ms", "call through endpoint p50 (ms)", ".3f"),
    ("endpoint_p99_ms", "call through endpoint p99 (ms)", ".3f"),
    ("added_p50_ms", "added latency per call, paired p50 (ms)", ".3f"),
    ("added_vs_same_transport_p50_ms", "added latency vs v1's transport, paired p50 (ms)", ".3f"),
    ("run_p50_ms", "harness.run, 1 call, p50 (ms)", ".3f"),
    ("run_p99_ms", "harness.run, 1 call, p99 (ms)", ".3f"),
    ("rollouts_per_s", "throughput (rollouts/s)", ".1f"),
    ("wall_s", "throughput wall time (s)", ".2f"),
    ("cpu_ms_per_rollout", "CPU time per rollout, this process (ms)", ".2f"),
    ("rollout_p50_ms", "rollout latency under load p50 (ms)", ".1f"),
    ("rollout_p99_ms", "rollout latency under load p99 (ms)", ".1f"),
    ("errors", "rollout errors", ".0f"),
    ("peak_rss_mib", "peak RSS, benchmark process (MiB)", ".1f"),
    *(
        (f"{dialect}_{kind}_added_p50_ms", f"added p50, {dialect}, {kind} (ms)", ".3f")
        for dialect in DIALECTS
        for kind in ("plain", "stream")
    ),
]


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def print_report(args: argparse.Namespace, runs: list[dict[str, float]], summary: dict[str, float]) -> None:
    title = "v1 rollouts benchmark"
    caption = (
        f"latency: {args.direct_calls} sequential calls each way; throughput: {args.n} rollouts "
        f"at concurrency {args.concurrency}, {'default GC' if args.default_gc else 'in v1.batch_gc()'}; "
        f"median of {len(runs)} repeat(s), then each run"
    )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text fallback
        print(f"{title} ({caption})")
        header = f"{'figure':<42}{'median':>12}" + "".join(f"{'run ' + str(i + 1):>12}" for i in range(len(runs)))
        print(header)
        for key, label, fmt in ROWS:
            if key not in summary:
                continue
            print(f"{label:<42}{summary[key]:>12{fmt}}" + "".join(f"{run[key]:>12{fmt}}" for run in runs))
        return
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    table.add_column("figure")
    table.add_column("median", justify="right", style="bold")
    for i in range(len(runs)):
        table.add_column(f"run {i + 1}", justify="right")
    for key, label, fmt in ROWS:
        if key not in summary:
            continue
        table.add_row(label, format(summary[key], fmt), *(format(run[key], fmt) for run in runs))
    Console().print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="rollouts in the throughput run (default 1000)")
    parser.add_argument("--concurrency", type=int, default=256, help="rollouts in flight at once (default 256)")
    parser.add_argument(
        "--direct-calls", type=int, default=300, help="sequential calls measured each way for latency (default 300)"
    )
    parser.add_argument(
        "--dialect-calls", type=int, default=100, help="calls per dialect and mode for the per-dialect figures; 0 skips them"
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeat everything; report medians (default 3)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="run the throughput rollouts with Python's default GC thresholds, not inside v1.batch_gc() as v1 eval does",
    )
    args = parser.parse_args(argv)
    for name in ("n", "concurrency", "direct_calls", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: list[dict[str, float]] = []
    all_errors: list[Any] = []
    with mock_server_process() as url:
        for i in range(args.repeats):
            print(f"repeat {i + 1}/{args.repeats} ...", file=sys.stderr, flush=True)
            figures, errors = run_loop(one_repeat(url, args))
            runs.append(figures)
            all_errors += errors
            gc.collect()
    summary = medians(runs)
    print(f"event loop: {'uvloop' if v1._util.loop_scope.uvloop_enabled() else 'asyncio'}", file=sys.stderr)
    print_report(args, runs, summary)
    if all_errors:
        print(f"{len(all_errors)} rollout(s) failed; first error: {all_errors[0]}", file=sys.stderr)
    if args.json:
        report = {
            "config": {
                "n": args.n,
                "concurrency": args.concurrency,
                "direct_calls": args.direct_calls,
                "dialect_calls": args.dialect_calls,
                "repeats": args.repeats,
            },
            "environment": {"python": platform.python_version(), "platform": platform.platform()},
            "median": summary,
            "runs": runs,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if all_errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
