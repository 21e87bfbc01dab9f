"""End to end: hundreds of rollouts of one `v1 eval` in flight together, below a low open-file limit.

The mock holds every request (a `Gate`) until as many as asked for are waiting at once, so what
is asserted is the concurrency the mock saw, never a time: a connection pool, a descriptor limit
or a queue that serialises rollouts leaves the count short, and the wait reports where it stuck.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.tools.gate import Gate
from tests.tools.patience import HANG_S
from v1._util.descriptors import DESCRIPTOR_RESERVE
from v1.testing import MockModelServer, Reply

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")
IN_FLIGHT = 300
"""Rollouts asked to be in flight at once: -n 30 -r 10."""
LOW_SOFT_LIMIT = 128
"""A soft open-file limit below `IN_FLIGHT` (the hard limit is left alone)."""
STUCK_S = 120.0
"""How long the count of waiting requests may stand still, short of the target, before the test calls it stuck."""


def under_limits(soft: int, hard: int | None, command: list[str]) -> list[str]:
    """`command` exec'd by a Python that first sets its open-file limits (soft, and hard when given)."""
    hard_expr = "h" if hard is None else str(hard)
    set_limits = (
        "import os, resource, sys; s, h = resource.getrlimit(resource.RLIMIT_NOFILE); "
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard_expr})); os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", set_limits, *command]


def eval_command(url: str, concurrency: int, out: Path) -> list[str]:
    flags = ["-m", "mock", "-b", url, "-n", "30", "-r", "10", "-c", str(concurrency), "--output-dir", str(out)]
    return [sys.executable, "-m", "v1.cli", "eval", CONFIG, *flags]


def wait_for_count(count: Callable[[], int], target: int, process: subprocess.Popen[str] | None = None) -> None:
    """Wait until `count()` reaches `target`; fail if it stands still for `STUCK_S`, or `process` exits first."""
    seen, since = -1, time.monotonic()
    while (now := count()) < target:
        if now != seen:
            seen, since = now, time.monotonic()
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{now} of {target} in flight when the process exited with {process.returncode}")
        if time.monotonic() - since > STUCK_S:
            raise AssertionError(f"stuck at {now} of {target} in flight at once: something serialises them")
        time.sleep(0.05)


def num_errors(out: Path) -> int:
    (run,) = list(out.iterdir())
    return int(json.loads((run / "metadata.json").read_text())["num_errors"])


def test_every_rollout_is_in_flight_at_once_below_a_low_soft_limit(tmp_path: Path) -> None:
    gate = Gate(open_for=0, respond=lambda request: Reply.text("ok"))
    with MockModelServer(gate, model="mock") as server:
        out = tmp_path / "out"
        command = under_limits(LOW_SOFT_LIMIT, None, eval_command(server.url, IN_FLIGHT, out))
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT) as proc:
            try:
                wait_for_count(lambda: gate.seen, IN_FLIGHT, proc)
                assert server.in_flight == IN_FLIGHT
            finally:
                gate.release()
            output, _ = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, output
        assert server.peak_in_flight == IN_FLIGHT
        assert num_errors(out) == 0


def test_a_hard_limit_below_the_concurrency_lowers_it_with_one_warning(tmp_path: Path) -> None:
    hard = IN_FLIGHT - 20  # fewer descriptors than the rollouts asked for: they would fail with EMFILE
    fitting = hard - DESCRIPTOR_RESERVE
    with MockModelServer(lambda request: Reply.text("ok", delay=1.0), model="mock") as server:
        out = tmp_path / "out"
        command = under_limits(hard, hard, eval_command(server.url, IN_FLIGHT, out))
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "ulimit -Hn" in line]
    assert warnings == [
        f"v1 eval: warning: -c {IN_FLIGHT}: this process may open {hard} files (its hard limit, `ulimit -Hn`) and each "
        f"rollout in flight holds at least one; running at most {fitting} at once (raise the hard limit to run more)"
    ]
    assert num_errors(out) == 0
    assert 0 < server.peak_in_flight <= fitting


def test_the_mock_server_process_holds_more_requests_than_a_low_soft_limit() -> None:
    command = under_limits(LOW_SOFT_LIMIT, None, [sys.executable, "-m", "v1.testing", "--delay", "3600"])
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as mock:
        try:
            assert mock.stdout is not None
            url = mock.stdout.readline().strip()
            origin = url.removesuffix("/v1")

            def in_flight() -> int:
                with urllib.request.urlopen(f"{origin}/mock/stats", timeout=STUCK_S) as answer:
                    return int(json.loads(answer.read())["in_flight"])

            async def flood() -> None:
                limits = httpx.Limits(max_connections=IN_FLIGHT + 10)
                async with httpx.AsyncClient(limits=limits, timeout=HANG_S) as client:
                    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                    calls = [asyncio.create_task(client.post(f"{url}/chat/completions", json=body)) for _ in range(IN_FLIGHT)]
                    await asyncio.to_thread(wait_for_count, in_flight, IN_FLIGHT, mock)
                    for call in calls:
                        call.cancel()
                    await asyncio.gather(*calls, return_exceptions=True)

            asyncio.run(flood())
        finally:
            mock.terminate()
            mock.wait(timeout=HANG_S)
