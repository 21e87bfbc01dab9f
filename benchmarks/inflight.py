"""Benchmark rollouts in flight: thousands of one-call rollouts of one `v1 eval` waiting on a slow model together.

    python benchmarks/inflight.py [--rollouts 10000] [--delay 30] [--concurrency ROLLOUTS] [--quick] [--json out.json]

Starts the mock model server (`python -m v1.testing --delay D`, its own
process, answering each request after D seconds), then runs the real `v1 eval`
command (its own process) on a TOML environment of `--rollouts` rows, one
model call each, at `-c --concurrency`. While it runs it samples, every
`--every` seconds, the eval process's open file descriptors (`/proc/PID/fd`),
RSS and threads, and the mock's requests in flight (its ``GET /mock/stats``).

Printed: the most rollouts in flight as the mock saw them (concurrent upstream
requests), the wall time against the ideal (start-up until the first request,
plus one delay per wave of `--concurrency`), errors, and peak descriptors and
RSS, in all and per rollout in flight above the eval's own baseline (sampled
just before its first model request). Exits 1 if the run had an error, or if
fewer rollouts were in flight at once than it asked for. Nothing asserts on
timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    """One short prompt per rollout (as many as the benchmark asked the eval for)."""
    count = int(os.environ.get("V1_INFLIGHT_ROWS", "100"))
    return [{"question": f"in-flight prompt {i}", "answer": str(i)} for i in range(count)]


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

    def baseline(self) -> Sample | None:
        """The last sample before the mock saw a request: the eval loaded, nothing in flight."""
        before = [s for s in self.samples if s.mock_requests == 0]
        return before[-1] if before else None

    def first_request_s(self) -> float | None:
        return next((s.at_s for s in self.samples if s.mock_requests > 0), None)


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


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    mock, url = start_mock(args.delay)
    origin = url.removesuffix("/v1")
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = Path(folder) / "inflight.toml"
            config.write_text(ENV_TOML)
            out = Path(folder) / "out"
            env = {**os.environ, "V1_INFLIGHT_ROWS": str(args.rollouts)}
            env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), str(ROOT), env.get("PYTHONPATH", "")])
            command = [sys.executable, "-m", "v1.cli", "eval", str(config), "-m", "mock", "-b", url]
            command += ["-n", str(args.rollouts), "-r", "1", "-c", str(args.concurrency), "--output-dir", str(out)]
            log = Path(folder) / "eval.log"
            with log.open("w") as sink:
                start = time.perf_counter()
                eval_proc = subprocess.Popen(
                    command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, text=True
                )
                trace = sample_until_done(eval_proc, mock.pid, origin, start, args.every)
                wall = time.perf_counter() - start
            stats = mock_stats(origin)
            metadata: dict[str, Any] = next((json.loads(p.read_text()) for p in out.glob("*/metadata.json")), {})
            tail = log.read_text()[-3000:]
    finally:
        stop(mock)
    return figures_of(args, eval_proc.returncode, wall, trace, stats, metadata, tail)


def figures_of(
    args: argparse.Namespace, code: int, wall: float, trace: Trace, stats: dict[str, int], metadata: dict[str, Any], tail: str
) -> dict[str, Any]:
    base = trace.baseline()
    first = trace.first_request_s()
    peak_in_flight = stats["peak_in_flight"]
    waves = math.ceil(args.rollouts / args.concurrency)
    per = max(peak_in_flight, 1)
    peak_fds, peak_rss = int(trace.peak("fds")), trace.peak("rss_mib")
    return {
        "rollouts": args.rollouts,
        "concurrency": args.concurrency,
        "delay_s": args.delay,
        "exit_code": code,
        "errors": metadata.get("num_errors"),
        "completed": metadata.get("num_rollouts") or metadata.get("num_examples"),
        "mock_requests": stats["requests"],
        "peak_in_flight": peak_in_flight,
        "wall_s": wall,
        "first_request_s": first,
        "ideal_wall_s": (first or 0.0) + waves * args.delay,
        "peak_fds": peak_fds,
        "baseline_fds": base.fds if base else None,
        "fds_per_rollout": (peak_fds - base.fds) / per if base else None,
        "peak_rss_mib": peak_rss,
        "baseline_rss_mib": base.rss_mib if base else None,
        "rss_kib_per_rollout": (peak_rss - base.rss_mib) * 1024 / per if base else None,
        "peak_threads": int(trace.peak("threads")),
        "soft_fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "hard_fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[1],
        "load_average": os.getloadavg(),
        "tail": tail if code != 0 else "",
        "samples": [asdict(s) for s in trace.samples],
    }


def report(figures: dict[str, Any]) -> None:
    f = figures
    print(f"{f['rollouts']} one-call rollouts at -c {f['concurrency']}, the mock answering after {f['delay_s']} s")
    print(f"  exit code {f['exit_code']}, errors {f['errors']}, requests the mock received {f['mock_requests']}")
    print(f"  peak rollouts in flight (concurrent requests at the mock): {f['peak_in_flight']}")
    first = f["first_request_s"]
    print(
        f"  wall {f['wall_s']:.1f} s; ideal {f['ideal_wall_s']:.1f} s "
        f"(first request at {first if first is None else round(first, 1)} s + the delay per wave)"
    )
    print(
        f"  descriptors: peak {f['peak_fds']}, before the first request {f['baseline_fds']}, {fmt(f['fds_per_rollout'])} per rollout in flight"
    )
    print(
        f"  RSS: peak {f['peak_rss_mib']:.0f} MiB, before the first request {fmt(f['baseline_rss_mib'], '.0f')} MiB, "
        f"{fmt(f['rss_kib_per_rollout'], '.1f')} KiB per rollout in flight"
    )
    print(f"  threads: peak {f['peak_threads']}; descriptor limit {f['soft_fd_limit']} (hard {f['hard_fd_limit']})")
    print(f"  load average {', '.join(f'{x:.1f}' for x in f['load_average'])}")
    if f["tail"]:
        print(f"  the eval's last output:\n{f['tail']}")


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10000)
    parser.add_argument("--delay", type=float, default=30.0, help="seconds the mock waits before each reply")
    parser.add_argument("--concurrency", type=int, default=None, help="-c of the eval (default: --rollouts)")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--quick", action="store_true", help="200 rollouts, a 2 s delay")
    parser.add_argument("--json", type=Path, default=None, help="write every figure and sample here")
    args = parser.parse_args()
    if args.quick:
        args.rollouts, args.delay = 200, 2.0
    if args.concurrency is None:
        args.concurrency = args.rollouts
    if args.rollouts < 1 or args.concurrency < 1 or args.delay < 0 or args.every <= 0:
        parser.error("--rollouts and --concurrency must be 1 or more, --delay 0 or more, --every above 0")
    figures = run(args)
    report(figures)
    if args.json:
        args.json.write_text(json.dumps({"python": platform.python_version(), **figures}, indent=2))
    wanted = min(args.rollouts, args.concurrency)
    return 0 if figures["exit_code"] == 0 and not figures["errors"] and figures["peak_in_flight"] >= wanted else 1


if __name__ == "__main__":
    sys.exit(main())
