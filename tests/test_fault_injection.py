"""The fault-injection run (benchmarks/fault_injection.py), scaled down: nothing lost, nothing silently wrong,
every injected failure accounted for as a counted retry or a recorded error, for every upstream client type."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tools.patience import HANG_S, growing_limits

ROOT = Path(__file__).resolve().parents[1]


def test_scaled_down_fault_injection_run(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(ROOT / "benchmarks" / "fault_injection.py"), "--rollouts", "50", "--failure-rate", "0.3"]
    # The client timeout must cut the injected hangs and no healthy call: on a loaded machine a healthy call can
    # outlast 3 s (one retry more than injected), so a longer timeout is tried. A hang lasts 4 timeouts.
    for timeout in itertools.islice(growing_limits(3), 3):
        limited = [*command, "--timeout", str(timeout), "--concurrency", "16", "--json", str(figures_path)]
        done = subprocess.run(limited, env=env, capture_output=True, text=True, timeout=HANG_S)
        assert figures_path.exists(), done.stdout + done.stderr
        figures = json.loads(figures_path.read_text())
        if figures["accounted"] <= figures["injected_total"]:
            break
    assert done.returncode == 0, done.stdout + done.stderr
    assert figures["rollouts"] == 50 and figures["lost"] == 0 and figures["silently_wrong"] == 0
    assert figures["injected_total"] >= 6 and figures["accounted"] == figures["injected_total"]
    assert set(figures["by_client_type"]) == {
        "openai_chat_completions",
        "openai_completions",
        "openai_chat_completions_token",
        "openai_responses",
        "anthropic_messages",
    }
    assert "lost: 0   silently wrong: 0" in done.stdout
