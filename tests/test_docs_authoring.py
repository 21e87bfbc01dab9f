"""docs/authoring.md shows what the author's loop really prints: each ``console`` block runs, in order, and is compared.

The commands run as processes in one folder; the model is a mock model server in this process
(the page's "adds right but sometimes ends with a period"). Only what varies between runs is
normalised (`tests.test_docs_output.normalise`, and the viewer's port).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.test_docs_output import cli_env, normalise
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "authoring.md"
BLOCK = re.compile(r"```(console|diff)\n(.*?)```", re.DOTALL)
PORT = (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:PORT")


def sloppy_adder(request: MockRequest) -> Reply:
    a, b = map(int, re.findall(r"\d+", request.last_user_text))
    return Reply.text(f"{a + b}." if (a + b) % 3 == 0 else str(a + b))


def shown(text: str) -> list[str]:
    return [PORT[0].sub(PORT[1], line) for line in normalise(text)]


def run_block(command: str, cwd: Path, url: str) -> str:
    argv = command.split()
    argv = [url if arg == "$URL" else arg for arg in argv]
    if "$RUN" in argv:
        (run,) = (cwd / "outputs" / "evals").iterdir()
        argv[argv.index("$RUN")] = str(run.relative_to(cwd))
    assert argv[0] == "v1", command
    process = [sys.executable, "-m", "v1.cli", *argv[1:]]
    env = {**cli_env(), "COLUMNS": "100"}
    if argv[1] == "view":  # serves until stopped: its first line is what it prints
        server = subprocess.Popen(process, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            return server.stdout.readline()
        finally:
            server.terminate()
            server.wait(timeout=HANG_S)
    result = subprocess.run(process, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stderr + result.stdout


def apply_diff(diff: str, path: Path) -> None:
    removed = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("-"))
    added = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+"))
    text = path.read_text()
    assert removed in text, removed
    path.write_text(text.replace(removed, added))


def test_the_authors_loop_prints_what_the_page_shows(tmp_path: Path) -> None:
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    commands = [body.splitlines()[0] for kind, body in blocks if kind == "console"]
    assert [command.split()[2] for command in commands] == ["init", "validate", "eval", "view", "rescore"]
    with MockModelServer(sloppy_adder, model="mock") as mock:
        for kind, body in blocks:
            if kind == "diff":
                apply_diff(body, tmp_path / "my_env" / "__init__.py")
                continue
            command, _, expected = body.partition("\n")
            printed = run_block(command.removeprefix("$ "), tmp_path, mock.url)
            assert shown(printed) == shown(expected), command
        assert {request.body.get("model") for request in mock.requests} == {"mock"}
        assert len(mock.requests) == 20  # the eval's 20 rollouts; validate and rescore called no model
