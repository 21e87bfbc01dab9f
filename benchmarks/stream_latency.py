"""Where a streamed call's added latency goes: wall time against CPU time, direct and through the endpoint.

    python benchmarks/stream_latency.py [--calls 300] [--repeats 3]

One in-process program makes `--calls` streamed Chat Completions calls straight to the mock
(the official SDK, its own transport) and the same calls through the rollout's endpoint, after a
warm-up, for each repeat. Per call it prints the median wall time and the CPU time this process
spent (the mock runs in its own process, pinned to its own core, as in `rollouts.py`). When the
call through the endpoint costs this process no more CPU than the direct one yet takes longer,
the difference is time spent waiting (on the upstream, or between the tasks that relay a stream),
not work v1 does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from openai import AsyncOpenAI
from rollouts import MESSAGES, MODEL, mock_server_process, run_loop

import v1


async def streamed_call(client: Any) -> None:
    stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    async for _chunk in stream:
        pass


async def measure(url: str, calls: int) -> dict[str, float]:
    direct = AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    figures: dict[str, float] = {}

    async def program(task: v1.Task, state: v1.State) -> None:
        through = state.get_client()
        for _ in range(30):
            await streamed_call(direct)
            await streamed_call(through)
        for name, client in (("direct", direct), ("through", through)):
            walls: list[float] = []
            cpu = time.process_time()
            for _ in range(calls):
                started = time.perf_counter()
                await streamed_call(client)
                walls.append(time.perf_counter() - started)
            figures[f"{name}_cpu_ms"] = (time.process_time() - cpu) / calls * 1000
            figures[f"{name}_wall_p50_ms"] = statistics.median(walls) * 1000

    harness = v1.Harness(
        program=program, client=v1.ClientConfig(api_base_url=url, max_retries=0), model=MODEL, max_turns=2 * calls + 100
    )
    try:
        state = await harness.run({"prompt": MESSAGES})
    finally:
        await direct.close()
    if state.get("error"):
        raise SystemExit(f"the streamed calls failed: {state['error']}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.calls, args.repeats) < 1:
        parser.error("--calls and --repeats must be at least 1")
    runs = []
    with mock_server_process() as url:
        for _ in range(args.repeats):
            runs.append(run_loop(measure(url, args.calls)))
    print(f"{'per streamed chat call (ms)':<34}{'direct':>9}{'through':>9}{'added':>9}")
    for kind in ("wall_p50", "cpu"):
        direct = statistics.median(run[f"direct_{kind}_ms"] for run in runs)
        through = statistics.median(run[f"through_{kind}_ms"] for run in runs)
        label = "wall time, p50" if kind == "wall_p50" else "CPU time of this process"
        print(f"{label:<34}{direct:>9.3f}{through:>9.3f}{through - direct:>9.3f}")
    print(f"medians of {args.repeats} repeats of {args.calls} calls each way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
