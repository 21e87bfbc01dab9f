"""v1's rollout rates against the physical limit: a raw aiohttp client on the same mock.

    python benchmarks/rate_vs_raw.py [--n 4000] [--concurrency 64 256] [--rounds 3] [--json out.json]

One mock model server (`python -m v1.testing --reply tool-call`, pinned to a CPU of its own) serves
every phase. Each round runs, per concurrency, fresh processes one after another:

1. raw: `raw_driver.py`, an aiohttp session posting `--n` Chat Completions requests (no v1);
2. floor: `floor_driver.py`, `--n` single-turn rollouts written inline with no framework: only the
   work v1's guarantees take (a keyed, recorded, narrowed call; a state checked to be JSON), on the
   raw client's aiohttp session. An upper bound for any rollout that keeps them;
3. single-turn: `commit_driver.py`, `--n` one-call base-loop rollouts of this checkout's v1;
4. tool loop: `commit_driver.py --tool-loop`, `--n` rollouts of two model calls and a Python tool;

each phase at every concurrency in turn, with the raw client run again after each of 2-4. A phase's share
of the raw rate is taken against the raw runs just before and just after it (their mean), and its rate at
the highest concurrency against its run at the lowest just before it, so a machine whose speed drifts
(a shared VM's often does, by half within a minute) moves both sides of each figure alike.

Printed: the medians over rounds of each rate, of CPU per request or rollout, of each phase's share
of the raw client's request rate (a tool-loop rollout counts as two requests), and of each phase's
rate at the highest concurrency against the lowest. Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rollouts import mock_server_process

HERE = Path(__file__).resolve().parent
PHASES = {
    "raw": [str(HERE / "raw_driver.py")],
    "floor": [str(HERE / "floor_driver.py")],
    "single-turn": [str(HERE / "commit_driver.py")],
    "tool loop": [str(HERE / "commit_driver.py"), "--tool-loop"],
}
REQUESTS_PER_UNIT = {"raw": 1, "floor": 1, "single-turn": 1, "tool loop": 2}


def run_phase(phase: str, url: str, n: int, concurrency: int) -> dict[str, Any]:
    """One fresh process of `phase`; its figures (rate and CPU per unit as `rollouts_per_s`, `cpu_ms_per_rollout`)."""
    command = [sys.executable, *PHASES[phase], "--url", url, "--n", str(n), "--concurrency", str(concurrency)]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(HERE.parent)}
    )
    if done.returncode != 0:
        raise SystemExit(f"{phase} at concurrency {concurrency} failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if figures.get("errors"):
        raise SystemExit(f"{phase} at concurrency {concurrency}: {figures['errors']} failed")
    return figures


def measure(n: int, concurrencies: list[int], rounds: int) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Each phase's runs by concurrency; a v1 phase's carry `paired_raw`, the mean raw rate beside them.

    A round runs each phase at every concurrency in turn (the raw client again after each v1 phase), so a
    phase's runs at two concurrencies, and each v1 run and the raw runs around it, are minutes apart at most.
    """
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {phase: {c: [] for c in concurrencies} for phase in PHASES}
    with mock_server_process(mock_args=["--reply", "tool-call"]) as url:
        for round_index in range(rounds):
            print(f"round {round_index + 1}/{rounds} ...", file=sys.stderr, flush=True)
            before = {c: run_phase("raw", url, n, c) for c in concurrencies}
            for concurrency, result in before.items():
                runs["raw"][concurrency].append(result)
            for phase in PHASES:
                if phase == "raw":
                    continue
                results = {c: run_phase(phase, url, n, c) for c in concurrencies}
                after = {c: run_phase("raw", url, n, c) for c in concurrencies}
                for concurrency in concurrencies:
                    pair = (before[concurrency]["rollouts_per_s"] + after[concurrency]["rollouts_per_s"]) / 2
                    results[concurrency]["paired_raw"] = pair
                    runs[phase][concurrency].append(results[concurrency])
                    runs["raw"][concurrency].append(after[concurrency])
                before = after
    return runs


def summarize(runs: dict[str, dict[int, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    rows = []
    for phase, by_concurrency in runs.items():
        for concurrency, results in by_concurrency.items():
            shares = [
                result["rollouts_per_s"] * REQUESTS_PER_UNIT[phase] / result.get("paired_raw", result["rollouts_per_s"])
                for result in results
            ]
            rows.append(
                {
                    "phase": phase,
                    "concurrency": concurrency,
                    "rate_per_s": statistics.median(result["rollouts_per_s"] for result in results),
                    "rates": [result["rollouts_per_s"] for result in results],
                    "paired_raw": [result.get("paired_raw") for result in results],
                    "cpu_ms": statistics.median(result["cpu_ms_per_rollout"] for result in results),
                    "shares": shares,
                    "share_of_raw": statistics.median(shares),
                }
            )
    return rows


def print_rows(rows: list[dict[str, Any]], n: int, rounds: int) -> None:
    print(
        f"{n} per run, median of {rounds} round(s); a tool-loop rollout is two requests; shares against the raw runs beside each"
    )
    print(f"{'phase':<12} {'conc.':>5} {'per s':>8} {'CPU ms':>7} {'of raw':>7}  runs")
    for row in rows:
        runs = ", ".join(f"{rate:.0f}" for rate in row["rates"])
        share = f"{100 * row['share_of_raw']:.0f}%"
        print(f"{row['phase']:<12} {row['concurrency']:>5} {row['rate_per_s']:>8.0f} {row['cpu_ms']:>7.3f} {share:>7}  {runs}")
    concurrencies = sorted({row["concurrency"] for row in rows})
    if len(concurrencies) > 1:
        low, high = concurrencies[0], concurrencies[-1]
        by_key = {(row["phase"], row["concurrency"]): row["rates"] for row in rows}
        ratios = ", ".join(f"{phase} {scaling(by_key[(phase, low)], by_key[(phase, high)]):.2f}x" for phase in PHASES)
        print(f"{high} against {low} (median of the runs side by side): {ratios}")


def scaling(low_rates: list[float], high_rates: list[float]) -> float:
    """The median over rounds of the rate at the high concurrency against the low one's run beside it."""
    return statistics.median(high / low for low, high in zip(low_rates, high_rates))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="requests or rollouts a run (default 4000)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256], help="in flight at once (default 64 256)")
    parser.add_argument("--rounds", type=int, default=3, help="each phase this many times, interleaved (default 3)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or any(c < 1 for c in args.concurrency):
        parser.error("--n, --rounds and every --concurrency must be at least 1")
    rows = summarize(measure(args.n, args.concurrency, args.rounds))
    print_rows(rows, args.n, args.rounds)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
