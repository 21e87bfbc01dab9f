"""The printed output the README shows is what the commands really print.

Each example runs for real (the CLI as a process, the model a mock model server
process over HTTP) and is compared line by line with the page, after
normalising only what legitimately varies between runs: timings and
throughput, the run folder's timestamp, and the column padding and rule
lengths that a wider or narrower timing value shifts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.tools.patience import HANG_S

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
VARYING = [
    (re.compile(r"\d+(\.\d+)? rollouts/s"), "N rollouts/s"),
    (re.compile(r"\d+(\.\d+)? s wall"), "N s wall"),
    (re.compile(r"rollout \d+ ms, model \d+ ms"), "rollout N ms, model N ms"),
    (re.compile(r"\b\d+:\d\d:\d\d$"), "H:MM:SS"),  # the live view's elapsed time
    (re.compile(r"\d{8}-\d{6}"), "YYYYMMDD-HHMMSS"),  # the run folder's timestamp
    (re.compile(r"(?<=│) +\d+ (?=│$)"), " N "),  # `v1 demo`'s per-rollout milliseconds (last column)
    (re.compile(r"[━─]+"), "━"),
    (re.compile(r" {2,}"), " "),
]


def normalise(text: str) -> list[str]:
    lines = []
    for line in text.strip("\n").splitlines():
        for pattern, replacement in VARYING:
            line = pattern.sub(replacement, line)
        lines.append(line.strip())
    return lines


def shown_after(marker: str) -> str:
    """The first plain ``` block after `marker` in the README."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n```\n", text.index(marker) + len(marker)) + len("\n```\n")
    return text[start : text.index("```", start)]


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_readme_demo_output_is_what_v1_demo_prints(tmp_path: Path) -> None:
    shown = shown_after("## What `v1 demo` prints")
    result = subprocess.run(
        [sys.executable, "-m", "v1.cli", "demo"],
        cwd=tmp_path,
        env={**cli_env(), "COLUMNS": "90"},
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert result.returncode == 0, result.stderr
    assert normalise(result.stdout) == normalise(shown)
    assert "12 rollouts" in shown


def test_readme_eval_output_is_what_v1_eval_prints(tmp_path: Path) -> None:
    command = re.search(r"```bash\n(v1 eval configs/reverse_text\.toml [^\n]*)\n```", README.read_text(encoding="utf-8"))
    assert command is not None
    shown = shown_after(command.group(0))
    assert "http://localhost:8000/v1" in command.group(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "v1.testing", "--reply", "imperfect-reverse", "--model", "Qwen/Qwen3-4B"],
        env=cli_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        args = command.group(1).split()[1:]
        args[args.index("http://localhost:8000/v1")] = url
        args[args.index("configs/reverse_text.toml")] = str(ROOT / "configs" / "reverse_text.toml")
        result = subprocess.run(
            [sys.executable, "-m", "v1.cli", *args],
            cwd=tmp_path,
            env={**cli_env(), "COLUMNS": "100"},
            capture_output=True,
            text=True,
            timeout=HANG_S,
        )
    finally:
        server.terminate()
        server.wait(timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    assert normalise(result.stderr + result.stdout) == normalise(shown)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """`.ci/run` is the README's test command, line for line, after its own `set` and `cd` preamble."""
    section = README.read_text(encoding="utf-8").split("Set up, lint, type-check and run the tests", 1)[1]
    readme_command = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ci_command = [line for line in ci_lines if line.strip() and not re.match(r"\s*#|set |cd ", line)]
    assert ci_command == readme_command
