"""Killing ``v1 train --nproc`` while its ranks are still importing ends them: they die with their launcher from their
first instruction (``PR_SET_PDEATHSIG`` before ``import v1``), not from a watch that starts after the imports.

Bounded by the hang guard only: the test polls /proc until no rank is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tools.patience import HANG_S
from tests.train.test_distributed import RECIPE, alive, child_env, children, short_recipe, wait_for
from v1.train import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def rank_pids(launcher: int) -> list[int]:
    """The launcher's children that torchrun started as ranks (``RANK`` in their environment)."""
    found = []
    for pid in children(launcher):
        try:
            if b"\0RANK=" in b"\0" + Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_killing_v1_train_nproc_while_its_ranks_import_leaves_no_rank(tmp_path: Path) -> None:
    config = short_recipe(RECIPE, tmp_path, max_steps=200)
    output_dir = Path(TrainConfig.load(config).output_dir)
    with (tmp_path / "launcher.err").open("w") as err:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "v1.cli", "train", str(config), "--nproc", "2", "--no-progress"],
            cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
        ranks: list[int] = []

        def both_ranks_started() -> bool:
            ranks.extend(pid for pid in rank_pids(launcher.pid) if pid not in ranks)
            return len(ranks) >= 2

        try:
            wait_for(both_ranks_started, "torchrun's two ranks")
            assert not output_dir.exists(), "the ranks were still starting: none had made the run's folder"
            os.kill(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=HANG_S)
            wait_for(lambda: not any(alive(pid) for pid in ranks), "both ranks gone after the launcher's SIGKILL")
        finally:
            for pid in {launcher.pid, *ranks}:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert not (output_dir / "metrics.jsonl").exists()
