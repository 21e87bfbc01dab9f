"""What saving a finished group costs the eval: `ResultsWriter.write` under concurrent writers.

    python benchmarks/results_writer.py [--outputs 8000] [--writers 256] [--repeats 3]

`v1 eval --save` hands each finished group's outputs to `ResultsWriter.write`, which writes them as
JSON lines on a thread of its own. Here `--writers` tasks write `--outputs` outputs of about 1.5 KB,
one group of one output each, in three shapes: a burst (the next write as soon as the last
returned, as when many rollouts end together), a stream (each writer first yields to the loop
0-19 times, so writes overlap less) and one writer at a time. Printed: CPU of this process (both
threads) per output, the median of `--repeats` runs, and how many trips to the writer thread the
run made. Every line is read back and checked. Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import tempfile
from pathlib import Path
from typing import Any

from v1.env import ResultsWriter


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def output(index: int) -> dict[str, Any]:
    """An output of a single-turn rollout, about 1.5 KB of JSON."""
    return {
        "example_id": index,
        "rollout_index": 0,
        "prompt": [{"role": "user", "content": f"prompt {index} " * 20}],
        "completion": [{"role": "assistant", "content": "answer " * 30}],
        "reward": 0.5,
        "metrics": {},
        "timing": {"total": 0.1},
        "trajectory": [
            {
                "prompt": [{"role": "user", "content": "x" * 200}],
                "completion": [{"role": "assistant", "content": "y" * 200}],
                "response": {"id": "r", "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
            }
        ],
        "stop_condition": "final_response",
        "error": None,
        "attempts": 1,
    }


async def run(outputs: int, writers: int, spread: int) -> tuple[float, int]:
    """CPU microseconds per output, and trips to the writer thread, of one run."""
    with tempfile.TemporaryDirectory() as folder:
        writer = ResultsWriter(folder)
        trips = [0]
        append = writer._append

        def counted(batch: Any) -> None:
            trips[0] += 1
            append(batch)

        writer._append = counted  # type: ignore[method-assign]
        rows = [output(index) for index in range(outputs)]
        left = iter(rows)

        async def one_writer(seed: int) -> None:
            draw = random.Random(seed)
            for row in left:
                for _ in range(draw.randrange(spread)):
                    await asyncio.sleep(0)
                await writer.write([row])

        started = cpu_seconds()
        await asyncio.gather(*(one_writer(seed) for seed in range(writers)))
        spent = cpu_seconds() - started
        await writer.close()
        lines = (Path(folder) / "results.jsonl").read_text().splitlines()
        if sorted(json.loads(line)["example_id"] for line in lines) != list(range(outputs)):
            raise SystemExit("the results file does not hold every output exactly once")
        return spent / outputs * 1e6, trips[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=8000)
    parser.add_argument("--writers", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.outputs < 1 or args.writers < 1 or args.repeats < 1:
        parser.error("--outputs, --writers and --repeats must be at least 1")
    shapes = [("burst", args.writers, 1), ("stream", args.writers, 20), ("one writer", 1, 1)]
    print(f"{'shape':<11} {'writers':>7} {'CPU us/output':>14} {'trips':>7}")
    for name, writers, spread in shapes:
        runs = [asyncio.run(run(args.outputs, writers, spread)) for _ in range(args.repeats)]
        cpu = statistics.median(micros for micros, _ in runs)
        trips = statistics.median(count for _, count in runs)
        print(f"{name:<11} {writers:>7} {cpu:>14.1f} {trips:>7.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
