"""What a sync user function's trip to a worker thread and back costs (every sync tool, reward and handler).

    python benchmarks/sync_calls.py [--n 20000] [--concurrency 1 64] [--rounds 3] [--against OTHER_TREE]

Each run is a fresh process on one CPU (`taskset -c 0` where it exists): `--n` calls of a trivial sync
function through `call_user_code` at each `--concurrency`, on uvloop where installed, after 1,000 not
counted. Printed per tree and concurrency: the median over `--rounds` of CPU microseconds a call (user +
system, all threads), the share of it in the kernel, and the threads the process ended with.
`--against` runs another checkout's v1 (a `git worktree` of an older commit) interleaved with this one's.
Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CHILD = """
import asyncio, json, resource, sys, threading
import v1
from v1._util.calling import call_user_code

def add_one(x):
    return x + 1

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime

async def main(n, concurrency):
    limit = asyncio.Semaphore(concurrency)
    async def one(i):
        async with limit:
            return await call_user_code(add_one, i)
    await asyncio.gather(*(one(i) for i in range(1000)))
    (total, system) = cpu()
    await asyncio.gather(*(one(i) for i in range(n)))
    (total_after, system_after) = cpu()
    return 1e6 * (total_after - total) / n, 1e6 * (system_after - system) / n

try:
    import uvloop
    factory = uvloop.new_event_loop
except ImportError:
    factory = None
with asyncio.Runner(loop_factory=factory) as runner:
    us, system_us = runner.run(main(int(sys.argv[1]), int(sys.argv[2])))
print(json.dumps({"us": us, "system_us": system_us, "threads": threading.active_count(), "v1": v1.__file__}))
"""


def one_run(tree: Path, n: int, concurrency: int) -> dict[str, Any]:
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    done = subprocess.run(
        [*pin, sys.executable, "-c", CHILD, str(n), str(concurrency)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,  # `-c` puts the working directory first on the path
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(figures["v1"]).startswith(str(tree)), f"ran {figures['v1']}, not {tree}'s v1"
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None, help="another checkout to run interleaved with this one")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or any(c < 1 for c in args.concurrency):
        parser.error("--n, --rounds and every --concurrency must be at least 1")
    if args.against is not None and not (args.against / "v1" / "__init__.py").is_file():
        parser.error(f"--against {args.against}: not a checkout of v1 (no v1/__init__.py there)")
    trees = [HERE.parent] + ([args.against.resolve()] if args.against else [])
    runs: dict[tuple[Path, int], list[dict[str, Any]]] = {(t, c): [] for t in trees for c in args.concurrency}
    for _ in range(args.rounds):
        for concurrency in args.concurrency:
            for tree in trees:
                runs[tree, concurrency].append(one_run(tree, args.n, concurrency))
    print(f"{args.n} calls a run, median of {args.rounds}; CPU us a call (kernel share), threads at the end")
    for (tree, concurrency), figures in runs.items():
        us = statistics.median(f["us"] for f in figures)
        system = statistics.median(f["system_us"] for f in figures)
        threads = max(int(f["threads"]) for f in figures)
        print(f"{tree!s:40} concurrency {concurrency:>4}: {us:6.1f} us ({system:5.1f} in the kernel), {threads} threads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
