"""Benchmark rollouts in flight: thousands of one-call rollouts of one `v1 eval` waiting on a slow model together.

    python benchmarks/inflight.py [--rollouts 10000] [--delay 30] [--concurrency ROLLOUTS] [--reference N]
                                  [--prompt-bytes N] [--quick] [--json out.json]

Starts the mock model server (`python -m v1.testing --delay D`, its own
process, answering each request after D seconds), then runs the real `v1 eval`
command (its own process) on a TOML environment of `--rollouts` rows, one
model call each, at `-c --concurrency`; `--prompt-bytes` pads each prompt to
that many bytes (a long conversation's request). While it runs it samples, every
`--every` seconds, the eval process's open file descriptors (`/proc/PID/fd`),
RSS, threads and CPU, the mock's descriptors, and the requests the mock holds
(its ``GET /mock/stats``).

Printed: the most rollouts in flight as the mock saw them (requests it held at
once), the wall time against the ideal (start-up until the first request, plus
the delay per wave of `--concurrency`), when all were in flight, errors, and the
eval's peak descriptors, RSS and threads. Per rollout in flight: the slope
between a first, smaller run (`--reference`, a tenth by default) and this one,
so the process's own descriptors and memory are not counted. Exits 1 if the run
had an error, or if fewer rollouts were in flight at once than it asked for.
Nothing asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rollouts import stop_process

ROOT = Path(__file__).resolve().parent.parent

ENV_TOML = """
[env]
name = "inflight"

[env.taskset]
source = "inflight:rows"

[env.harness]
max_turns = 1
"""


def rows() -> list[dict[str, Any]]:
    """One prompt per rollout (as many as the benchmark asked the eval for), padded to `--prompt-bytes`."""
    count = int(os.environ.get("V1_INFLIGHT_ROWS", "100"))
    size = int(os.environ.get("V1_INFLIGHT_PROMPT_BYTES", "0"))
    return [{"question": f"in-flight prompt {i}".ljust(size, "."), "answer": str(i)} for i in range(count)]


@dataclass
class Sample:
    at_s: float
    fds: int
    rss_mib: float
    threads: int
    cpu_s: float
    mock_fds: int
    mock_cpu_s: float
    mock_in_flight: int
    mock_requests: int


@dataclass
class Trace:
    samples: list[Sample] = field(default_factory=list)

    def peak(self, name: str) -> float:
        return max((getattr(s, name) for s in self.samples), default=0)

    def first_s(self, holds: Callable[[Sample], bool]) -> float | None:
        """When `holds` first held of a sample."""
        return next((s.at_s for s in self.samples if holds(s)), None)


TICKS = os.sysconf("SC_CLK_TCK")


def process_figures(pid: int) -> tuple[int, float, int, float] | None:
    """Open descriptors, RSS (MiB), threads and CPU seconds (user + system) of `pid`; None once it has gone."""
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields.get("VmRSS", "0 kB").split()[0])
    utime, stime = stat.rsplit(")", 1)[1].split()[11:13]
    return fds, rss_kib / 1024, int(fields.get("Threads", "0")), (int(utime) + int(stime)) / TICKS


def mock_stats(origin: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{origin}/mock/stats", timeout=10) as answer:
        return dict(json.loads(answer.read()))


def start_mock(delay: float) -> tuple[subprocess.Popen[str], str]:
    """`python -m v1.testing --delay` in its own process; it and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "v1.testing", "--port", "0", "--model", "mock", "--delay", str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"the mock did not start (exit {proc.wait()})")
    return proc, url


def sample_until_done(eval_proc: subprocess.Popen[str], mock_pid: int, origin: str, start: float, every: float) -> Trace:
    trace = Trace()
    while eval_proc.poll() is None:
        figures = process_figures(eval_proc.pid)
        mock = process_figures(mock_pid) or (0, 0.0, 0, 0.0)
        try:
            stats = mock_stats(origin)
        except OSError:
            stats = {"in_flight": -1, "requests": -1}
        if figures is not None:
            fds, rss, threads, cpu = figures
            at = time.perf_counter() - start
            trace.samples.append(Sample(at, fds, rss, threads, cpu, mock[0], mock[3], stats["in_flight"], stats["requests"]))
        time.sleep(every)
    return trace


def run_eval(rollouts: int, concurrency: int, delay: float, every: float, prompt_bytes: int = 0) -> dict[str, Any]:
    """One `v1 eval` of `rollouts` at `-c concurrency` against a fresh mock answering after `delay`; its figures."""
    mock, url = start_mock(delay)
    origin = url.removesuffix("/v1")
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = Path(folder) / "inflight.toml"
            config.write_text(ENV_TOML)
            out = Path(folder) / "out"
            env = {**os.environ, "V1_INFLIGHT_ROWS": str(rollouts), "V1_INFLIGHT_PROMPT_BYTES": str(prompt_bytes)}
            env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(ROOT), env.get("PYTHONPATH", "")])
            command = [sys.executable, "-m", "v1.cli", "eval", str(config), "-m", "mock", "-b", url]
            command += ["-n", str(rollouts), "-r", "1", "-c", str(concurrency), "--output-dir", str(out)]
            log = Path(folder) / "eval.log"
            with log.open("w") as sink:
                before = os.times()
                start = time.perf_counter()
                eval_proc = subprocess.Popen(
                    command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, text=True
                )
                trace = sample_until_done(eval_proc, mock.pid, origin, start, every)
                wall = time.perf_counter() - start
                cpu = os.times()
            stats = mock_stats(origin)
            metadata: dict[str, Any] = next((json.loads(p.read_text()) for p in out.glob("*/metadata.json")), {})
            output = log.read_text()
    finally:
        stop_process(mock, grace=15)
    peak_in_flight = stats["peak_in_flight"]
    first = trace.first_s(lambda s: s.mock_requests > 0)
    return {
        "rollouts": rollouts,
        "concurrency": concurrency,
        "delay_s": delay,
        "prompt_bytes": prompt_bytes,
        "exit_code": eval_proc.returncode,
        "errors": metadata.get("num_errors"),
        "mock_requests": stats["requests"],
        "peak_in_flight": peak_in_flight,
        "wall_s": wall,
        "first_request_s": first,
        "all_in_flight_s": trace.first_s(lambda s: s.mock_in_flight >= peak_in_flight > 0),
        "ideal_wall_s": (first or 0.0) + math.ceil(rollouts / concurrency) * delay,
        "eval_cpu_s": cpu.children_user + cpu.children_system - before.children_user - before.children_system,
        "peak_fds": int(trace.peak("fds")),
        "peak_rss_mib": trace.peak("rss_mib"),
        "peak_threads": int(trace.peak("threads")),
        "peak_mock_fds": int(trace.peak("mock_fds")),
        "warnings": [line for line in output.splitlines() if line.startswith("v1 eval: warning")],
        "tail": output[-3000:] if eval_proc.returncode != 0 else "",
        "samples": [asdict(s) for s in trace.samples],
    }


def per_rollout(run: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, float | None]:
    """Descriptors and RSS each rollout in flight adds: the slope between the reference run and this one."""
    if reference is None or run["peak_in_flight"] <= reference["peak_in_flight"]:
        return {"fds_per_rollout": None, "rss_kib_per_rollout": None}
    more = run["peak_in_flight"] - reference["peak_in_flight"]
    return {
        "fds_per_rollout": (run["peak_fds"] - reference["peak_fds"]) / more,
        "rss_kib_per_rollout": (run["peak_rss_mib"] - reference["peak_rss_mib"]) * 1024 / more,
    }


def report(run: dict[str, Any], reference: dict[str, Any] | None) -> None:
    r = run
    prompt = f", prompts of {r['prompt_bytes']} bytes" if r["prompt_bytes"] else ""
    print(f"{r['rollouts']} one-call rollouts at -c {r['concurrency']}, the mock answering after {r['delay_s']:g} s{prompt}")
    print(f"  exit code {r['exit_code']}, errors {r['errors']}, requests the mock received {r['mock_requests']}")
    for warning in r["warnings"]:
        print(f"  {warning}")
    print(f"  peak rollouts in flight (requests the mock held at once): {r['peak_in_flight']}")
    print(
        f"  wall {r['wall_s']:.1f} s, ideal {r['ideal_wall_s']:.1f} s (the first request at {fmt(r['first_request_s'], '.1f')} s "
        f"+ the delay per wave of -c); all in flight at {fmt(r['all_in_flight_s'], '.1f')} s; eval CPU {r['eval_cpu_s']:.1f} s"
    )
    print(
        f"  eval process: peak {r['peak_fds']} descriptors, {r['peak_rss_mib']:.0f} MiB RSS, {r['peak_threads']} threads; "
        f"the mock: peak {r['peak_mock_fds']} descriptors"
    )
    if reference is not None:
        slope = per_rollout(run, reference)
        print(
            f"  per rollout in flight (against {reference['peak_in_flight']} in flight: {reference['peak_fds']} descriptors, "
            f"{reference['peak_rss_mib']:.0f} MiB): {fmt(slope['fds_per_rollout'])} descriptors, "
            f"{fmt(slope['rss_kib_per_rollout'], '.1f')} KiB RSS"
        )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"  open-file limit here {soft} (hard {hard}); load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if r["tail"]:
        print(f"  the eval's last output:\n{r['tail']}")


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10000)
    parser.add_argument("--delay", type=float, default=30.0, help="seconds the mock waits before each reply")
    parser.add_argument("--concurrency", type=int, default=None, help="-c of the eval (default: --rollouts)")
    parser.add_argument(
        "--reference", type=int, default=None, help="rollouts of the run first made to subtract (default a tenth; 0: none)"
    )
    parser.add_argument("--prompt-bytes", type=int, default=0, help="pad each prompt to this many bytes (0: short prompts)")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--quick", action="store_true", help="200 rollouts, a 2 s delay")
    parser.add_argument("--json", type=Path, default=None, help="write every figure and sample here")
    args = parser.parse_args()
    if args.quick:
        args.rollouts, args.delay = 200, 2.0
    if args.concurrency is None:
        args.concurrency = args.rollouts
    if args.reference is None:
        args.reference = args.rollouts // 10
    if (
        args.rollouts < 1
        or args.concurrency < 1
        or args.delay < 0
        or args.every <= 0
        or not 0 <= args.reference < args.rollouts
        or not 0 <= args.prompt_bytes <= 10_000_000
    ):
        parser.error(
            "--rollouts and --concurrency must be 1 or more, --delay 0 or more, --every above 0, --reference below --rollouts, "
            "--prompt-bytes from 0 to 10000000"
        )
    reference = None
    if args.reference:
        reference = run_eval(args.reference, args.reference, args.delay, args.every, args.prompt_bytes)
        print(
            f"reference: {args.reference} rollouts, peak {reference['peak_fds']} descriptors, {reference['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
    run = run_eval(args.rollouts, args.concurrency, args.delay, args.every, args.prompt_bytes)
    report(run, reference)
    if args.json:
        summary = {"python": platform.python_version(), "load_average": os.getloadavg(), "run": run, "reference": reference}
        args.json.write_text(json.dumps({**summary, "per_rollout": per_rollout(run, reference)}, indent=2))
    wanted = min(args.rollouts, args.concurrency)
    return 0 if run["exit_code"] == 0 and not run["errors"] and run["peak_in_flight"] >= wanted else 1


if __name__ == "__main__":
    sys.exit(main())
