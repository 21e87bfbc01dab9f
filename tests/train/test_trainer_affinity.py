"""The trainer sizes its threads from the cores it may run on (its affinity mask), not the machine's count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.tools.patience import HANG_S

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import os; from v1.train._run import usable_cores; print(usable_cores(), os.cpu_count())"


def test_under_taskset_one_core_the_trainer_counts_one() -> None:
    done = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", PROBE],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    usable, machine = map(int, done.stdout.split())
    assert usable == 1 and machine >= 2, "this machine has 2 cores: one is outside the mask"
