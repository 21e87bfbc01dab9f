"""benchmarks/overhead.py and benchmarks/compare_commits.py in their quick modes, as real subprocesses against the
real mock model server: every figure present and sane, no request failed. No timing is asserted."""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, echo, tool_caller

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args], env=env, capture_output=True, text=True, timeout=HANG_S
    )


@pytest.mark.parametrize("paired", [False, True], ids=["phases", "paired"])
def test_overhead_quick_measures_every_rate_direct_and_through_v1(tmp_path: Path, paired: bool) -> None:
    figures_path = tmp_path / "overhead.json"
    done = run_script("overhead.py", "--quick", "--json", str(figures_path), *(["--paired"] if paired else []))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(figures_path.read_text())["rows"]
    assert [(row["mode"], row["rate"]) for row in rows] == [("plain", 20), ("plain", 50), ("stream", 20), ("stream", 50)]
    for row in rows:
        count = row["rate"] * 0.5
        for side in ("direct", "through"):
            assert row[f"{side}_errors"] == 0 and row[f"{side}_requests"] == row[f"{side}_completed"] == count
            assert row[f"{side}_rate"] > 0
            latencies = [row[f"{side}_p{q}_ms"] for q in (50, 90, 99)]
            # Every reply waits the upstream's fixed 50 ms, so no latency can be shorter.
            assert all(value >= 50 for value in latencies) and latencies == sorted(latencies)
        # The recorded step's upstream call waited the 50 ms too, within the rollout's whole latency.
        assert all(50 <= row[f"through_upstream_leg_p{q}_ms"] for q in (50, 90, 99))
        assert row["through_upstream_leg_p50_ms"] <= row["through_p99_ms"]
        assert not any("call_only" in name for name in row)
        # One upstream request a request on each side, as the mock counted them (each side in a phase of its own).
        assert row["mock_requests"] == 2 * count
        if not paired:
            assert row["direct_mock_requests"] == row["through_mock_requests"] == count
        for q in (50, 90, 99):
            assert math.isclose(row[f"added_p{q}_ms"], row[f"through_p{q}_ms"] - row[f"direct_p{q}_ms"])
            # Each slot paired a direct and a through-v1 request, so their differences exist (only then).
            assert math.isfinite(row[f"paired_added_p{q}_ms"]) if paired else f"paired_added_p{q}_ms" not in row
    modes = [line.split()[0] for line in done.stdout.splitlines()[2:]]
    assert "through v1" in done.stdout and modes == ["plain", "plain", "stream", "stream"]
    assert ("added, paired" in done.stdout) == paired


async def test_overhead_sends_the_direct_side_to_the_mock_and_the_other_through_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mock sees who called: the direct side's requests come from the bare aiohttp client with the body it built,
    the through-v1 side's from v1's upstream client (never the bare one), one of each a request of the run."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    overhead = importlib.import_module("overhead")
    rate, duration = 20.0, 0.5
    with MockModelServer() as mock:
        rows, errors = await overhead.measure(mock.url, [rate], duration, False)
    assert errors == [] and len(rows) == 2
    per_side = round(rate * min(overhead.WARMUP_S, duration / 2)) + round(rate * duration)  # warm-up and measured
    bare_agent = f"Python/{sys.version_info.major}.{sys.version_info.minor} aiohttp/{aiohttp.__version__}"
    for stream in (False, True):
        sent = [request for request in mock.requests if bool(request.body.get("stream")) == stream]
        direct = [request for request in sent if request.headers.get("User-Agent") == bare_agent]
        assert len(sent) == 2 * per_side and len(direct) == per_side
        assert all(request.body == json.loads(overhead.chat_body(overhead.MODEL, stream)) for request in direct)
    assert [row["direct_mock_requests"] for row in rows] == [rate * duration] * 2


def test_compare_commits_runs_both_worktrees_and_profiles_them(tmp_path: Path) -> None:
    figures_path = tmp_path / "compare.json"
    done = run_script(
        "compare_commits.py", "HEAD", "HEAD~1", "--rounds", "1", "--n", "20", "--concurrency", "8", "--profile", "--tool-loop",
        "--json", str(figures_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(figures_path.read_text())
    head, parent = (
        subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], capture_output=True, text=True, check=True).stdout.strip()
        for ref in ("HEAD", "HEAD~1")
    )
    assert report["commits"]["A"]["commit"] == head and report["commits"]["B"]["commit"] == parent
    (round_figures,) = report["rounds"]
    for label in ("A", "B"):
        figures = round_figures[label]
        assert figures["errors"] == 0 and figures["rollouts_per_s"] > 0 and figures["cpu_ms_per_rollout"] > 0
        # Each commit's own code ran, from the worktree made for it (removed since).
        assert f"{os.sep}{label}{os.sep}v1{os.sep}__init__.py" in figures["v1_file"]
        assert not Path(figures["v1_file"]).exists()
        parts = report["profile_ms_per_rollout"][label]
        assert parts["v1 endpoint"] > 0 and parts["v1 harness, state, lifecycle"] > 0
    assert "B / A" in done.stdout and "CPU per rollout by part of the stack" in done.stdout


def test_compare_commits_refuses_a_name_that_is_no_commit() -> None:
    done = run_script("compare_commits.py", "HEAD", "no-such-commit-xyz", "--rounds", "1")
    assert done.returncode == 2
    assert done.stderr.strip() == f"compare_commits.py: error: 'no-such-commit-xyz' is not a commit of {ROOT}"


@pytest.mark.parametrize(
    ("script", "arguments", "message"),
    [
        ("overhead.py", ["--rates", "0"], "must be a positive number, got 0"),
        ("overhead.py", ["--rates", "100", "-5"], "must be a positive number, got -5"),
        ("overhead.py", ["--rates", "nan"], "must be a positive number, got nan"),
        ("overhead.py", ["--duration", "inf"], "must be a positive number, got inf"),
        ("overhead.py", ["--delay", "fast"], "invalid positive value: 'fast'"),
        ("overhead.py", ["--rates", "1e6", "--duration", "10"], "within 1,000,000 requests a phase"),
        ("compare_commits.py", ["HEAD", "HEAD", "--rounds", "0"], "--rounds must be between 1 and 1,000,000"),
        ("compare_commits.py", ["HEAD", "HEAD", "--n", "-1"], "--n must be between 1 and 1,000,000"),
        ("compare_commits.py", ["HEAD", "HEAD", "--concurrency", "10000000"], "--concurrency must be between 1 and 1,000,000"),
    ],
)
def test_bad_flags_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: str, arguments: list[str], message: str
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module(script.removesuffix(".py"))
    with pytest.raises(SystemExit) as exited:
        module.parse_args(arguments)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)


def test_rate_vs_raw_times_the_raw_client_and_both_loops_at_each_concurrency(tmp_path: Path) -> None:
    figures_path = tmp_path / "rates.json"
    done = run_script("rate_vs_raw.py", "--n", "40", "--rounds", "1", "--concurrency", "4", "16", "--json", str(figures_path))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(figures_path.read_text())
    assert [(row["phase"], row["concurrency"]) for row in rows] == [
        (phase, concurrency) for phase in ("raw", "floor", "single-turn", "tool loop") for concurrency in (4, 16)
    ]
    raw_runs = {row["concurrency"]: row["rates"] for row in rows if row["phase"] == "raw"}
    for row in rows:
        assert row["rate_per_s"] > 0 and row["cpu_ms"] > 0
        if row["phase"] == "raw":  # once before the first v1 phase and once after each of the three
            assert len(row["rates"]) == 4 and row["share_of_raw"] == 1.0
            continue
        # The share is the rate against the raw runs just before and after it, a tool-loop rollout counting as two requests.
        index = ("floor", "single-turn", "tool loop").index(row["phase"])
        beside = raw_runs[row["concurrency"]][index : index + 2]
        requests = 2 if row["phase"] == "tool loop" else 1
        assert len(row["rates"]) == 1 and row["paired_raw"] == [sum(beside) / 2]
        assert math.isclose(row["share_of_raw"], row["rate_per_s"] * requests / (sum(beside) / 2))
    assert "16 against 4 (median of the runs side by side): raw" in done.stdout
    rates = {(row["phase"], row["concurrency"]): row["rates"][0] for row in rows}
    tool_loop_scaling = float(done.stdout.splitlines()[-1].rsplit("tool loop ", 1)[1].rstrip("x"))
    assert math.isclose(tool_loop_scaling, rates["tool loop", 16] / rates["tool loop", 4], abs_tol=0.006)


def test_rate_vs_raw_refuses_a_zero_count_in_one_line() -> None:
    done = run_script("rate_vs_raw.py", "--n", "0")
    assert done.returncode == 2 and "must be at least 1" in done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("url", ["https://127.0.0.1:1/v1", "http://127.0.0.1/v1", "not a url", ""])
def test_raw_pool_driver_refuses_a_url_it_cannot_post_to_in_one_line(url: str) -> None:
    done = run_script("raw_pool_driver.py", "--url", url, "--n", "1")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"raw_pool_driver.py: --url {url!r} must be http://HOST:PORT/... (the plain pool speaks plain HTTP)"
    ]


@pytest.mark.parametrize(
    "driver",
    [
        ["commit_driver.py"],
        ["commit_driver.py", "--tool-loop"],
        ["commit_driver.py", "--no-call"],
        ["raw_driver.py"],
        ["raw_pool_driver.py"],
        ["floor_driver.py"],
    ],
)
def test_a_gated_driver_stops_between_its_warm_up_and_its_timed_part(driver: list[str]) -> None:
    """`instructions.py` counts callgrind's instructions between READY and DONE: the mock must have seen the
    warm-up's requests, and none of the timed ones, at READY, and every timed one at DONE."""
    n, per_unit = 6, 2 if "--tool-loop" in driver else 0 if "--no-call" in driver else 1
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with MockModelServer(tool_caller if per_unit == 2 else echo) as mock:
        command = [sys.executable, str(BENCHMARKS / driver[0]), *driver[1:], "--url", mock.url, "--n", str(n), "--gate"]
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as process:
            assert process.stdin is not None and process.stdout is not None
            seen = []
            for word in ("READY", "DONE"):
                assert process.stdout.readline().strip() == word
                seen.append(len(mock.requests))
                process.stdin.write("\n")
                process.stdin.flush()
            figures = json.loads(process.stdout.read().strip().splitlines()[-1])
            assert process.wait(timeout=HANG_S) == 0
    assert seen == [n * per_unit, 2 * n * per_unit]  # the warm-up is min(32, n) units, then n timed ones; no call: none
    assert figures["errors"] == 0


def test_instructions_without_valgrind_says_what_to_install(tmp_path: Path) -> None:
    only_git = tmp_path / "bin"  # a PATH with git (compare_commits needs it) and no valgrind
    only_git.mkdir()
    git = shutil.which("git")
    assert git is not None
    (only_git / "git").symlink_to(git)
    env = {**os.environ, "PATH": str(only_git), "PYTHONPATH": str(ROOT)}
    for script, arguments, status in (
        ("instructions.py", ["--n", "5"], 1),
        ("compare_commits.py", ["HEAD", "HEAD", "--instructions"], 2),
    ):
        done = subprocess.run(
            [sys.executable, str(BENCHMARKS / script), *arguments], env=env, capture_output=True, text=True, timeout=HANG_S
        )
        assert done.returncode == status
        assert done.stderr.strip().splitlines()[-1] == (
            f"{script}: error: valgrind and callgrind_control not found: install valgrind (apt-get install valgrind)"
        )


def test_sync_calls_times_each_checkout_at_each_concurrency(tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(ROOT / "v1", other / "v1")  # another checkout's v1, as a worktree would hold it
    done = run_script("sync_calls.py", "--n", "200", "--rounds", "1", "--concurrency", "1", "8", "--against", str(other))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if " concurrency " in line]
    assert [(line.split()[0], line.split()[2].rstrip(":")) for line in rows] == [
        (str(ROOT), "1"),
        (str(ROOT), "8"),
        (str(other), "1"),
        (str(other), "8"),
    ]
    for line in rows:
        assert float(line.split(":")[1].split("us")[0]) > 0 and line.endswith("threads")


def test_sync_calls_refuses_a_zero_count_and_a_folder_without_v1_in_one_line(tmp_path: Path) -> None:
    for args, fragment in (
        (["--n", "0"], "must be at least 1"),
        (["--concurrency", "-4"], "must be at least 1"),
        (["--against", str(tmp_path)], "not a checkout of v1"),
    ):
        done = run_script("sync_calls.py", *args)
        assert done.returncode == 2 and fragment in done.stderr.strip().splitlines()[-1], done.stderr
