"""Benchmark `v1 eval`: rollouts/s, peak RSS, and what writing results costs.

    python benchmarks/eval_throughput.py [--rollouts 2000] [--concurrency 256] [--repeats 3] [--scale 4] [--json out.json]

Each measurement is one fresh process running `v1 eval` (the real command: the
TOML environment, the live view, the run folder) against the mock model server
(`python -m v1.testing`, its own process). Modes: `--save` and `--no-save` at
`--rollouts`, and `--save` at `--scale` times as many rollouts, to show that
memory does not grow with the number of rollouts (results stream to disk and the
summary is incremental). Figures: rollouts/s (from the run's own `time_ms`),
peak RSS of the eval process, its CPU per rollout between the two `--save` sizes
(what `v1 eval` adds to each rollout, start-up cancelled out), and medians across
repeats. Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GROUP = 2

ENV_TOML = """
[env]
name = "bench"

[env.taskset]
source = "eval_throughput:rows"

[[env.taskset.rewards]]
fn = "tasksets.reverse_text:similarity"

[env.harness]
max_turns = 1
"""


def rows() -> list[dict[str, Any]]:
    """Short distinct prompts; as many as the child was asked for."""
    count = int(__import__("os").environ.get("V1_BENCH_ROWS", "1000"))
    return [{"question": f"benchmark prompt number {i}", "answer": f"{i} rebmun tpmorp kramhcneb"} for i in range(count)]


def time_writing(results: Path, folder: Path) -> float:
    """Seconds to write these outputs again the way an eval does: JSON-encode, append and flush, one group at a time."""
    from v1.env import ResultsWriter

    outputs = [json.loads(line) for line in results.read_text().splitlines()]
    writer = ResultsWriter(folder)
    start = time.perf_counter()
    for index in range(0, len(outputs), GROUP):
        writer._append(outputs[index : index + GROUP])
    writer._close_file()
    return time.perf_counter() - start


def child(args: argparse.Namespace) -> None:
    """Run `v1 eval` in this process and print its figures as JSON."""
    sys.path.insert(0, str(ROOT))
    from v1.cli import main

    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "bench.toml"
        config.write_text(ENV_TOML)
        out = Path(folder) / "out"
        flags = ["-m", "mock", "-b", args.url, "-n", str(args.rollouts // GROUP), "-r", str(GROUP), "-c", str(args.concurrency)]
        flags += ["--save" if args.mode == "save" else "--no-save", "--output-dir", str(out)]
        start = time.perf_counter()
        code = main(["eval", str(config), *flags])
        wall = time.perf_counter() - start
        if code != 0:
            raise SystemExit(code)
        usage = resource.getrusage(resource.RUSAGE_SELF)  # before time_writing loads the outputs
        peak, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        metadata: dict[str, Any] = {}
        size, write_s = 0, None
        for run in out.glob("*"):
            metadata = json.loads((run / "metadata.json").read_text())
            size = (run / "results.jsonl").stat().st_size
            write_s = time_writing(run / "results.jsonl", Path(folder) / "rewrite")
    print(
        "BENCH "
        + json.dumps(
            {
                "mode": args.mode,
                "rollouts": args.rollouts,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_rss_mib": peak,
                "results_bytes": size,
                "write_ms_per_rollout": write_s * 1000 / args.rollouts if write_s is not None else None,
                "eval_s": metadata.get("time_ms", 0) / 1000 if metadata else None,
                "errors": metadata.get("num_errors") if metadata else None,
            }
        )
    )


def run_child(url: str, mode: str, rollouts: int, concurrency: int) -> dict[str, Any]:
    import os

    env = {**os.environ, "V1_BENCH_ROWS": str(rollouts // GROUP)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--url",
        url,
        "--rollouts",
        str(rollouts),
        "--concurrency",
        str(concurrency),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return dict(json.loads(lines[-1][len("BENCH ") :]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=int, default=4, help="also run --save at this many times --rollouts (0: skip)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", choices=["save", "nosave"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        child(args)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from rollouts import mock_server_process

    plan = [("save", args.rollouts), ("nosave", args.rollouts)]
    if args.scale:
        plan.append(("save", args.rollouts * args.scale))
    runs: dict[str, list[dict[str, Any]]] = {}
    with mock_server_process() as url:
        for repeat in range(args.repeats):
            for mode, rollouts in plan:
                figures = run_child(url, mode, rollouts, args.concurrency)
                figures["rollouts_per_s"] = rollouts / figures["wall_s"]
                runs.setdefault(f"{mode} x{rollouts}", []).append(figures)
                print(
                    f"repeat {repeat + 1}: {mode:>6} {rollouts:>6} rollouts: {figures['rollouts_per_s']:7.1f} rollouts/s "
                    f"(command wall {figures['wall_s']:.2f} s), peak RSS {figures['peak_rss_mib']:.0f} MiB, "
                    f"results {figures['results_bytes'] / 1e6:.1f} MB",
                    flush=True,
                )
    medians = {
        name: {
            key: statistics.median(r[key] for r in values)
            for key in ("rollouts_per_s", "wall_s", "cpu_s", "peak_rss_mib", "results_bytes")
        }
        for name, values in runs.items()
    }
    print(f"\nmedians of {args.repeats} repeats, concurrency {args.concurrency}, groups of {GROUP}:")
    for name, figures in medians.items():
        print(f"  {name:>14}: {figures['rollouts_per_s']:7.1f} rollouts/s, peak RSS {figures['peak_rss_mib']:.0f} MiB")
    writes = [r["write_ms_per_rollout"] for r in runs[f"save x{args.rollouts}"]]
    print(f"  writing results (encode + append + flush per group): {statistics.median(writes):.3f} ms per rollout")
    save, nosave = medians[f"save x{args.rollouts}"], medians[f"nosave x{args.rollouts}"]
    cost = save["wall_s"] - nosave["wall_s"]
    print(f"  cost of --save at {args.rollouts} rollouts: {cost * 1000:+.0f} ms ({cost / nosave['wall_s']:+.1%} of the run)")
    if args.scale > 1:
        big = medians[f"save x{args.rollouts * args.scale}"]
        extra = args.rollouts * (args.scale - 1)
        print(
            f"  CPU per rollout of the eval process, the {extra} rollouts between the two --save sizes "
            f"(start-up and imports cancel out): {(big['cpu_s'] - save['cpu_s']) * 1000 / extra:.3f} ms"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "config": vars(args) | {"json": str(args.json)},
                    "python": platform.python_version(),
                    "median": medians,
                    "runs": runs,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
