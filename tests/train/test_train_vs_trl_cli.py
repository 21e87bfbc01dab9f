"""benchmarks/train_vs_trl.py refuses in one line: TRL missing, bad flags, an unusable output folder (exit status 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools.patience import HANG_S

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_vs_trl.py"
WITHOUT_TRL = "import runpy, sys; sys.modules['trl'] = None; runpy.run_path({!r}, run_name='__main__')"


def run(*args: str, without_trl: bool = False) -> subprocess.CompletedProcess[str]:
    command = (
        [sys.executable, "-c", WITHOUT_TRL.format(str(SCRIPT)), *args] if without_trl else [sys.executable, str(SCRIPT), *args]
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=HANG_S)


def test_without_trl_it_says_so_in_one_line_and_exits_2() -> None:
    done = run("--steps", "1", without_trl=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "train_vs_trl: TRL is not installed; install the benchmark extra: pip install -e '.[bench]'"
    ]
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--steps", "0"], "--steps: between 1 and 100000, got 0"),
        (["--steps", "-5"], "--steps: between 1 and 100000, got -5"),
        (["--steps", "10000000000000000000000"], "--steps: between 1 and 100000"),
        (["--steps", "many"], "--steps: invalid step_count value: 'many'"),
        (["--seeds", "-1"], "--seeds: a seed is in [0, 2**31), got -1"),
        (["--threads", "0"], "--threads: between 1 and the"),
        (["--threads", "100000"], "--threads: between 1 and the"),
        (["--shape", "llama-70b"], "--shape: invalid choice: 'llama-70b'"),
        (["--max-staleness", "17"], "--max-staleness: between 0 and 16, got 17"),
        (["--frameworks", "verl"], "--frameworks: invalid choice: 'verl'"),
        (["--lr", "0"], "--lr: a learning rate in (0, 1], got 0"),
        (["--lr", "nan"], "--lr: a learning rate in (0, 1], got nan"),
        (["--lr", "1e300"], "--lr: a learning rate in (0, 1], got 1e300"),
        (["--lr", "fast"], "--lr: invalid learning_rate value: 'fast'"),
        (["--warmup-steps", "-1"], "--warmup-steps: between 0 and 100000, got -1"),
    ],
)
def test_bad_flags_are_refused_with_the_flag_named(args: list[str], expected: str) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert expected in done.stderr.strip().splitlines()[-1]


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run("--frameworks", "v1", "--out", str(blocker / "inside"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"train_vs_trl: cannot use --out {blocker / 'inside'}: Not a directory"]
