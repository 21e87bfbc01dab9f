"""What the eval summary costs as a run grows: `EvalSummary.add` per rollout and `metadata()` per write.

    python benchmarks/eval_summary.py [--examples 1000 10000 100000] [--rollouts-per-example 3]

`v1 eval` folds every rollout into an `EvalSummary` and rewrites `metadata.json` from its
`metadata()` at most once a second; a metadata write whose cost grows with the number of
examples stalls the event loop more the longer the run. Printed: microseconds per `add` and
milliseconds per `metadata()` at each size (medians of 5 reads). Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from v1.env import EvalSummary


def measure(examples: int, per_example: int) -> tuple[float, float]:
    draw = random.Random(0)
    summary = EvalSummary()
    outputs = [
        {"example_id": index, "reward": draw.random(), "stop_condition": "done", "timing": {"total": 1.0}}
        for index in range(examples)
        for _ in range(per_example)
    ]
    started = time.perf_counter()
    for output in outputs:
        summary.add(output)
    add_us = (time.perf_counter() - started) / len(outputs) * 1e6
    reads = []
    for _ in range(5):
        started = time.perf_counter()
        summary.metadata()
        reads.append((time.perf_counter() - started) * 1000)
    return add_us, statistics.median(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rollouts-per-example", type=int, default=3)
    args = parser.parse_args()
    if any(n < 1 for n in args.examples) or args.rollouts_per_example < 1:
        parser.error("--examples and --rollouts-per-example must be at least 1")
    print(f"{'examples':>9} {'add us':>8} {'metadata() ms':>14}")
    for examples in args.examples:
        add_us, read_ms = measure(examples, args.rollouts_per_example)
        print(f"{examples:>9} {add_us:>8.1f} {read_ms:>14.3f}")


if __name__ == "__main__":
    main()
