"""Benchmark tool loops: Python tools, MCP tools, and what an MCP server costs per rollout.

    python benchmarks/tools.py [--n 512] [--concurrency 128] [--startup-rollouts 8] [--repeats 3] [--python-only]

The mock model server runs as a separate process (see `rollouts.py`). Each repeat, on a
fresh event loop, measures:

1. tool-loop throughput: `--n` rollouts at `--concurrency`, each one model call asking
   for a tool, the tool call, and a final model call (two model calls per rollout):
   - with a Python tool (`add`);
   - with the same tool served by one global-scope MCP server (tests/tools/mcp_server.py,
     a real subprocess written with the `mcp` SDK's server side);
2. MCP calls on one connection: one at a time and 256 at once (calls/s), and the wall time of
   256 concurrent calls of a tool that sleeps 50 ms (12.8 s if they were serialised);
   every result is checked;
3. MCP server start-up cost per rollout: `--startup-rollouts` sequential rollouts with a
   rollout-scoped MCP toolset, minus the same rollouts with the Python tool.

Figures are the median across repeats. Nothing asserts on timing; the process exits
non-zero if a rollout failed or a result was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rollouts import pin_mock, run_loop

import v1
from v1.testing import MockModelServer, MockRequest, Reply

SERVER = str(Path(__file__).parent.parent / "tests" / "tools" / "mcp_server.py")


def tool_responder(request: MockRequest) -> Reply:
    """`tool:NAME:N` asks for NAME(a=N, b=1); after a tool result, answer with it."""
    last = request.last_message
    if last.get("role") == "tool":
        return Reply.text(str(last.get("content")))
    _, name, n = request.last_user_text.split(":")
    return Reply.tool(name, {"a": int(n), "b": 1})


def serve_mock() -> None:
    server = MockModelServer(tool_responder).start()
    print(server.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop()


@contextmanager
def mock_server_process() -> Iterator[str]:
    """The tool-calling mock model in a process of its own (its CPU is not charged to the loop measured)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-mock"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        print(pin_mock(proc.pid), file=sys.stderr, flush=True)
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def mcp_server(**kwargs: Any) -> v1.MCPTool:
    return v1.MCPTool(sys.executable, [SERVER], **kwargs)


async def throughput(url: str, toolset: v1.Toolset, n: int, concurrency: int) -> tuple[float, int]:
    """Rollouts/s of the tool loop, and the number of failed or wrong rollouts."""
    harness = v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model="m", toolsets=[toolset])
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool:
        async with semaphore:
            state = await harness.run({"prompt": f"tool:add:{i}"})
        return state["error"] is None and state["completion"][1]["content"] == str(i + 1)

    await asyncio.gather(*(one(i) for i in range(min(32, n))))  # warm-up: pools, server start
    start = time.perf_counter()
    with v1.batch_gc():  # as Env.generate (v1 eval) runs its rollouts
        results = await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - start
    await harness.teardown()
    return n / elapsed, results.count(False)


async def mcp_calls(calls: int) -> tuple[float, float, float, int]:
    """On one connection: calls/s one at a time and `calls` at once, the wall time of `calls`
    concurrent calls of a tool that sleeps 50 ms (serialised, that would be calls * 0.05 s), and
    the number of wrong results."""
    connection = mcp_server().connect()
    await connection.start()
    try:
        await asyncio.gather(*(connection.call("add", {"a": i, "b": 1}) for i in range(32)))
        start = time.perf_counter()
        for i in range(64):
            await connection.call("add", {"a": i, "b": 1})
        sequential = 64 / (time.perf_counter() - start)
        start = time.perf_counter()
        results = await asyncio.gather(*(connection.call("add", {"a": i, "b": 1}) for i in range(calls)))
        concurrent = calls / (time.perf_counter() - start)
        start = time.perf_counter()
        waits = await asyncio.gather(*(connection.call("wait", {"seconds": 0.05}) for _ in range(calls)))
        waiting = time.perf_counter() - start
    finally:
        await connection.aclose()
    wrong = sum(result.structured_content != {"result": i + 1} for i, result in enumerate(results))
    wrong += sum(result.structured_content != {"result": "waited"} for result in waits)
    return sequential, concurrent, waiting, wrong


async def startup_cost(url: str, rollouts: int) -> tuple[float, float, int]:
    """Mean seconds per sequential rollout with a rollout-scoped MCP server and with a Python tool."""
    figures = []
    failures = 0
    for toolset in (v1.Toolset([mcp_server()], scope="rollout"), v1.Toolset([add])):
        harness = v1.Harness(client=v1.ClientConfig(api_base_url=url, max_retries=0), model="m", toolsets=[toolset])
        await harness.run({"prompt": "tool:add:1"})
        start = time.perf_counter()
        for i in range(rollouts):
            state = await harness.run({"prompt": f"tool:add:{i}"})
            failures += state["error"] is not None or state["completion"][1]["content"] != str(i + 1)
        figures.append((time.perf_counter() - start) / rollouts)
    return figures[0], figures[1], failures


async def one_repeat(url: str, args: argparse.Namespace) -> dict[str, float]:
    python_rps, python_failed = await throughput(url, v1.Toolset([add]), args.n, args.concurrency)
    if args.python_only:
        return {"python_tool_rollouts_per_s": python_rps, "failures": python_failed}
    mcp_rps, mcp_failed = await throughput(url, v1.Toolset([mcp_server()], scope="global"), args.n, args.concurrency)
    sequential, calls_per_s, waiting, wrong = await mcp_calls(256)
    with_mcp, with_python, startup_failed = await startup_cost(url, args.startup_rollouts)
    return {
        "python_tool_rollouts_per_s": python_rps,
        "mcp_tool_rollouts_per_s": mcp_rps,
        "mcp_calls_per_s_one_at_a_time": sequential,
        "mcp_calls_per_s_at_256": calls_per_s,
        "mcp_256_calls_of_50ms_tool_wall_s": waiting,
        "rollout_s_with_rollout_scoped_mcp": with_mcp,
        "rollout_s_with_python_tool": with_python,
        "mcp_startup_s_per_rollout": with_mcp - with_python,
        "failures": python_failed + mcp_failed + wrong + startup_failed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--startup-rollouts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python-only", action="store_true", help="only the tool loop with a Python tool (item 1)")
    parser.add_argument("--serve-mock", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_mock:
        serve_mock()
        return 0
    runs = []
    with mock_server_process() as url:
        for repeat in range(args.repeats):
            run = run_loop(one_repeat(url, args))
            runs.append(run)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k}={v:.3f}" for k, v in run.items()), flush=True)
    print(f"\nmedian of {args.repeats} ({args.n} rollouts at concurrency {args.concurrency}):")
    for key in runs[0]:
        print(f"  {key:38s} {statistics.median(run[key] for run in runs):10.3f}")
    return 1 if any(run["failures"] for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
