"""R1: a run folder handed to `v1 eval --resume` never chooses what runs or where the key goes.

Written as the attacker would: a crafted `metadata.json`, `v1 eval --resume` as a real process, and a
loopback HTTP server that records every request (and its Authorization header) that reaches it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.test_e2e_eval_failures import CONFIG, error_lines, saved_lines, v1_cli
from v1.env import ResultsWriter
from v1.testing import MockModelServer, reverser

SECRET = "sk-the-users-real-key"


class Recorder(ThreadingHTTPServer):
    """A loopback server that answers like a model server and records each request's path and Authorization."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                recorder.seen.append((self.path, self.headers.get("Authorization")))
                body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def attacker() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def crafted_run(folder: Path, *, env: str = CONFIG, harness: dict[str, Any] | None = None, **settings: Any) -> Path:
    """A run folder as an attacker writes it: a saved invocation of their choosing."""
    saved = {
        "env": env,
        "taskset": {},
        "harness": harness or {},
        "settings": {"num_examples": 1, "rollouts_per_example": 1, **settings},
    }
    ResultsWriter(folder).write_metadata_now({"env_id": "reverse_text", "model": "m", "eval_settings": saved})
    return folder


def test_resume_alone_of_a_crafted_folder_runs_nothing_and_sends_no_key(attacker: Recorder, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run = crafted_run(
        tmp_path / "run",
        harness={"program": {"command": ["sh", "-c", f"touch {marker}"]}},
        base_url=attacker.url,
        api_key_var="MY_REAL_KEY",
        model="m",
    )
    result = v1_cli("eval", "--resume", str(run), cwd=tmp_path, MY_REAL_KEY=SECRET)
    assert result.returncode == 2, result.stderr
    (line,) = error_lines(result.stderr)
    assert line.startswith(f"v1 eval: error: --resume {run}: ")
    for difference in ("env (saved ", "harness (saved ", "base_url (saved ", "api_key_var (saved 'MY_REAL_KEY', now None)"):
        assert difference in line, line
    assert attacker.seen == []  # no GET /models, no key
    assert not marker.exists()
    assert saved_lines(run) == []


def test_a_folder_cannot_swap_the_url_the_key_or_the_program_under_the_users_command(attacker: Recorder, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with MockModelServer(reverser, model="m") as mine:
        command = ("eval", CONFIG, "-b", mine.url, "-m", "m", "-k", "MY_REAL_KEY", "--resume")
        cases = {
            "base_url": crafted_run(tmp_path / "url", base_url=attacker.url, api_key_var="MY_REAL_KEY"),
            "api_key_var": crafted_run(tmp_path / "key", base_url=mine.url, api_key_var="OTHER_SECRET"),
            "harness": crafted_run(
                tmp_path / "program",
                harness={"program": {"command": ["sh", "-c", f"touch {marker}"]}},
                base_url=mine.url,
                api_key_var="MY_REAL_KEY",
            ),
            "env_args": crafted_run(
                tmp_path / "env_args", base_url=mine.url, api_key_var="MY_REAL_KEY", env_args={"command": f"touch {marker}"}
            ),
        }
        for field, run in cases.items():
            result = v1_cli(*command, str(run), cwd=tmp_path, MY_REAL_KEY=SECRET, OTHER_SECRET="sk-other")
            assert result.returncode == 2, (field, result.stderr)
            (line,) = error_lines(result.stderr)
            assert f"{field} (saved " in line, line
            assert not marker.exists(), field
        # Without -b the registry picks the URL: the folder's registry (a Python file is run) is refused too.
        registry = tmp_path / "mine.toml"
        registry.write_text(f'[mock]\nmodel = "m"\nurl = "{mine.url}"\nkey = "MY_REAL_KEY"\n')
        (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\nENDPOINTS = {{}}\n")
        run = crafted_run(tmp_path / "registry", endpoints=str(tmp_path / "evil.py"))
        result = v1_cli("eval", CONFIG, "-m", "mock", "-e", str(registry), "--resume", str(run), cwd=tmp_path, MY_REAL_KEY=SECRET)
        assert result.returncode == 2, result.stderr
        (line,) = error_lines(result.stderr)
        assert f"endpoints (saved '{tmp_path / 'evil.py'}', now '{registry}')" in line, line
        assert not marker.exists()
        assert mine.requests == []  # refused before the preflight: the user's server saw nothing either
    assert attacker.seen == []


def test_resume_with_the_same_command_finishes_the_saved_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MockModelServer(reverser, model="m") as server:
        command = ("eval", CONFIG, "-b", server.url, "-m", "m", "-n", "2", "-r", "1", "--output-dir", str(out))
        first = v1_cli(*command, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        (run,) = out.iterdir()
        (run / "results.jsonl").write_text("")  # as if killed before any group finished
        resumed = v1_cli(*command, "--resume", str(run), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(saved_lines(run)) == 2


def test_a_folder_cannot_raise_what_the_run_costs(tmp_path: Path) -> None:
    """The folder's counts, sampling args, concurrency and retries are never taken: the command's are."""
    with MockModelServer(reverser, model="m") as mine:
        run = crafted_run(
            tmp_path / "costly",
            base_url=mine.url,
            api_key_var="MY_REAL_KEY",
            rollouts_per_example=40,
            sampling_args={"max_tokens": 999_999},
            max_concurrent=4096,
            max_retries=50,
        )
        command = ("eval", CONFIG, "-b", mine.url, "-m", "m", "-k", "MY_REAL_KEY", "-n", "1", "-r", "1", "--resume", str(run))
        result = v1_cli(*command, cwd=tmp_path, MY_REAL_KEY=SECRET)
        assert result.returncode == 0, result.stderr
        assert len(mine.requests) == 1  # one row, one rollout: the command's -r 1, not the folder's 40
        assert "max_tokens" not in mine.requests[0].body
    assert len(saved_lines(run)) == 1
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["rollouts_per_example"] == 1 and metadata["num_rollouts"] == 1


def test_resume_without_the_runs_counts_names_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MockModelServer(reverser, model="m") as server:
        command = ("eval", CONFIG, "-b", server.url, "-m", "m", "--output-dir", str(out))
        first = v1_cli(*command, "-n", "2", "-r", "2", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        (run,) = out.iterdir()
        (run / "results.jsonl").write_text("")
        resumed = v1_cli(*command, "--resume", str(run), cwd=tmp_path)
    assert resumed.returncode == 2, resumed.stderr
    (line,) = error_lines(resumed.stderr)
    assert "rollouts_per_example (saved 2, now " in line and "num_examples (saved 2, now " in line, line
    assert saved_lines(run) == []
