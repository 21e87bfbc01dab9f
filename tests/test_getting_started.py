"""docs/getting-started.md works as written: its `bash` blocks run, in order, in a fresh clone.

The `sh` block is the install step, which is what CI itself ran before the tests
(`.ci/run`): here the clone runs on that installation, through `PYTHONPATH`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from tests.tools.patience import HANG_S

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting-started.md"


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_installs_with_the_ci_command() -> None:
    (install,) = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert install.strip() == 'python -m pip install -e ".[test]"'
    assert 'python -m pip install -q -e ".[test]"' in (ROOT / ".ci" / "run").read_text()


def test_getting_started_commands_run_in_a_fresh_clone(tmp_path: Path) -> None:
    assert shutil.which("v1"), "the v1 script is missing: install with the page's command first"
    clone = tmp_path / "v1"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=HANG_S)
    script = "set -euo pipefail\n" + "\n".join(bash_blocks())
    env = {**os.environ, "PYTHONPATH": str(clone), "V1_SANDBOX_ROOT": str(tmp_path / "sandboxes")}
    # its own process group, so the mock server it starts in the background goes too if a step fails
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=HANG_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = sorted((clone / "outputs" / "evals").iterdir())
    assert [run.name.split("--")[0] for run in runs] == ["my_env", "reverse_text"]
    reverse = json.loads((runs[-1] / "metadata.json").read_text())
    assert reverse["num_rollouts"] == 8 and reverse["avg_reward"] == 1.0
    assert "2 passed" in result.stdout
