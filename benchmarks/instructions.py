"""Instructions per rollout, counted by callgrind: a figure that CPU steal, load and clock speed do not move.

    python benchmarks/instructions.py [--n 300] [--concurrency 64] [--json out.json]

Rates and CPU times on a shared virtual machine swing with the hypervisor's steal; the number of
instructions a rollout executes does not. Each phase runs its driver (`raw_driver.py`, then
`commit_driver.py --no-call`, `floor_driver.py`, single-turn and `--tool-loop`) under valgrind's callgrind with counting off,
warms up, and counts only the `--n` timed requests or rollouts: the driver's `--gate` stops
before and after them and counting is switched on and off there (`callgrind_control -i`).
Printed: millions of instructions per raw request, per rollout whose program calls no model (the
framework's own lifecycle: state, endpoint session, scoring, finalize), per floor rollout (a
single-turn rollout written inline with no framework, `floor_driver.py`), per single-turn rollout
and per tool-loop rollout, and each against the raw client's count for as many requests (a
tool-loop rollout is two; the no-call rollout is set against one request, for scale). The same
count run on two commits is `compare_commits.py --instructions`.

What it does not see: time in the kernel (socket system calls count as one instruction), cache
misses and waiting. So it tells apart two versions of v1's own work, while `rate_vs_raw.py`
gives the rates. Needs valgrind (`apt-get install valgrind`); the mock is this checkout's,
outside valgrind, on a CPU of its own. A run takes about a minute a phase, most of it starting
Python under valgrind.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rate_vs_raw import PHASES as RATE_PHASES
from rate_vs_raw import REQUESTS_PER_UNIT as RATE_REQUESTS_PER_UNIT
from rollouts import env_with_path_first, mock_server_process

HERE = Path(__file__).resolve().parent
PHASES = {"raw": RATE_PHASES["raw"], "no call": [str(HERE / "commit_driver.py"), "--no-call"], **RATE_PHASES}
REQUESTS_PER_UNIT = {"no call": 1, **RATE_REQUESTS_PER_UNIT}
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


class CountError(Exception):
    """A counted run that could not be made; its message is one line for the user."""


def check_valgrind() -> None:
    """Raises CountError when valgrind or callgrind_control is not installed."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise CountError(f"{' and '.join(missing)} not found: install valgrind (apt-get install valgrind)")


def _step(driver: subprocess.Popen[str], expected: str, switch: str) -> None:
    """Read the driver's `expected` word, switch callgrind's counting (`on`/`off`), let the driver go on."""
    assert driver.stdout is not None and driver.stdin is not None
    said = driver.stdout.readline().strip()
    if said != expected:
        driver.kill()
        _, err = driver.communicate()
        raise CountError(f"the driver said {said!r} instead of {expected}: {err.strip()[-2000:]}")
    subprocess.run(["callgrind_control", "-i", switch, str(driver.pid)], check=True, capture_output=True)
    driver.stdin.write("\n")
    driver.stdin.flush()


def count(driver_args: list[str], url: str, n: int, concurrency: int, pythonpath: Path) -> dict[str, Any]:
    """One driver run under callgrind (`check_valgrind` first), counting only its timed part; its figures plus `instructions`."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as folder:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={folder}/callgrind.out",
            sys.executable,
            *driver_args,
            *("--url", url, "--n", str(n), "--concurrency", str(concurrency), "--gate"),
        ]
        env = env_with_path_first(pythonpath) | {"PYTHONHASHSEED": "0"}  # the same dict layouts run to run
        driver = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        _step(driver, "READY", "on")
        _step(driver, "DONE", "off")
        out, err = driver.communicate()
    collected = _COLLECTED.search(err)
    if driver.returncode != 0 or collected is None:
        raise CountError(f"the counted driver failed (exit {driver.returncode}): {err.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if figures.get("errors"):
        raise CountError(f"{figures['errors']} of the counted requests or rollouts failed")
    figures["instructions"] = int(collected.group(1))
    figures["instructions_per_unit"] = figures["instructions"] / n
    return figures


def measure(n: int, concurrency: int) -> dict[str, dict[str, Any]]:
    check_valgrind()
    runs: dict[str, dict[str, Any]] = {}
    with mock_server_process(mock_args=["--reply", "tool-call"]) as url:
        for phase, driver_args in PHASES.items():
            print(f"{phase} under callgrind ...", file=sys.stderr, flush=True)
            runs[phase] = count(driver_args, url, n, concurrency, HERE.parent)
    return runs


def report(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    raw = runs["raw"]["instructions_per_unit"]
    rows = {
        phase: {
            "millions_per_unit": figures["instructions_per_unit"] / 1e6,
            "raw_share": REQUESTS_PER_UNIT[phase] * raw / figures["instructions_per_unit"],
        }
        for phase, figures in runs.items()
    }
    print(f"{'phase':<13}{'M instr. per unit':>19}{'raw / v1':>10}")
    for phase, row in rows.items():
        print(f"{phase:<13}{row['millions_per_unit']:>19.3f}{row['raw_share']:>10.0%}")
    print("unit: a raw request, a rollout; raw / v1: the raw client's count for as many requests, over v1's")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="requests or rollouts counted a phase (default 300)")
    parser.add_argument("--concurrency", type=int, default=64, help="in flight at once (default 64)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    for name in ("n", "concurrency"):
        if not 1 <= getattr(args, name) <= 100_000:
            parser.error(f"--{name} must be between 1 and 100,000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = measure(args.n, args.concurrency)
    except CountError as exc:
        print(f"instructions.py: error: {exc}", file=sys.stderr)
        return 1
    rows = report(runs)
    if args.json:
        environment = {"python": platform.python_version(), "platform": platform.platform()}
        config = {"n": args.n, "concurrency": args.concurrency}
        Path(args.json).write_text(
            json.dumps({"config": config, "environment": environment, "runs": runs, "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
