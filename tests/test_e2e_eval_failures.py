"""`v1 eval` and `v1 demo` when things go wrong: real CLI processes against the mock model server over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import v1
from tests.tools.gate import Gate
from tests.tools.patience import HANG_S, wait_until
from v1.cli import main
from v1.cli._eval import EvalSettings, new_run_folder
from v1.env import ResultsWriter, create_run_folder
from v1.testing import MockModelServer, MockRequest, Reply, requiring_key, reverser, serving_only

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")
NO_CLIENT_RETRIES = ("--harness.client.max_retries", "0")


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}


def v1_cli(*args: str, cwd: Path, timeout: float = HANG_S, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "v1.cli", *args],
        cwd=cwd,
        env=cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("v1 eval: error")]


def saved_lines(run: Path) -> list[dict[str, Any]]:
    """The complete lines of results.jsonl (a poll can land while the writer is mid-line; that line is not saved yet)."""
    path = run / "results.jsonl"
    text = path.read_text() if path.exists() else ""
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines()]


def only_run(output_dir: Path) -> Path:
    runs = list(output_dir.iterdir()) if output_dir.exists() else []
    assert len(runs) == 1, runs
    return runs[0]


# -- item 8: run folders ------------------------------------------------------------------------


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path: Path) -> None:
    settings = EvalSettings(output_dir=str(tmp_path))
    first, second = new_run_folder(settings, "env", "model"), new_run_folder(settings, "env", "model")
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name == first.name + "-2"
    # Many at once, from threads: every caller gets a folder nobody else got.
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(create_run_folder(tmp_path, "race"))) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 16 and all(path.is_dir() for path in made)


def test_an_output_dir_that_is_a_file_is_one_line(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    assert main(["eval", CONFIG, "-m", "m", "-b", mock.url, "--output-dir", str(taken)]) == 2
    assert capsys.readouterr().err.strip() == f"v1 eval: error: {taken}: cannot create a run folder there (File exists)"
    assert mock.requests == []


def test_two_evals_at_once_never_share_a_run_folder(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = reverser
    out = tmp_path / "out"
    args = [sys.executable, "-m", "v1.cli", "eval", CONFIG, "-m", "m", "-b", mock.url, "-n", "3", "-r", "2"]
    runs = [
        subprocess.Popen(
            [*args, "--output-dir", str(out)], cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    for process in runs:
        process.communicate(timeout=HANG_S)
        assert process.returncode == 0
    folders = sorted(out.iterdir())
    assert len(folders) == 2
    for folder in folders:
        keys = sorted((o["example_id"], o["rollout_index"]) for o in saved_lines(folder))
        assert keys == [(e, i) for e in range(3) for i in range(2)]


# -- item 9: fail fast ----------------------------------------------------------------------------


def test_a_dead_server_fails_fast_with_one_line(tmp_path: Path) -> None:
    # Old behaviour: every rollout retried connecting for about two minutes. The preflight's one line and exit 3,
    # before any run folder exists, show nothing retried: no deadline needed (one would fail on a loaded machine).
    result = v1_cli("eval", CONFIG, "-m", "m", "-b", "http://127.0.0.1:9/v1", "-n", "2", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    (line,) = error_lines(result.stderr)
    assert line == (
        "v1 eval: error: cannot connect to the model server at http://127.0.0.1:9/v1 (connection refused); "
        "is it running, and is the URL right?"
    )
    assert not (tmp_path / "out").exists()


def test_a_url_missing_v1_says_so(mock: MockModelServer, tmp_path: Path) -> None:
    root = mock.url.removesuffix("/v1")
    result = v1_cli("eval", CONFIG, "-m", "m", "-b", root, "-n", "2", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == 3
    assert error_lines(result.stderr) == [f"v1 eval: error: {root} has no OpenAI API, but {root}/v1 has: the URL is missing /v1"]
    assert mock.requests == [] and not (tmp_path / "out").exists()


@contextmanager
def provider_answering(status: int) -> Iterator[str]:
    """A stand-in provider that answers every request with `status` and an OpenAI error body."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": f"status {status}", "type": "invalid_request_error"}}, status=status)

    def serve() -> None:
        loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        state.update(loop=loop, port=runner.addresses[0][1])
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(HANG_S)
    try:
        yield f"http://127.0.0.1:{state['port']}/v1"
    finally:
        state["loop"].call_soon_threadsafe(state["loop"].stop)
        thread.join(HANG_S)


def test_a_refused_key_fails_before_the_run(tmp_path: Path) -> None:
    with provider_answering(401) as url:
        result = v1_cli(
            "eval", CONFIG, "-m", "m", "-b", url, "-k", "MY_KEY", "--output-dir", "out", cwd=tmp_path, MY_KEY="sk-bad"
        )
    assert result.returncode == 3, result.stderr
    assert error_lines(result.stderr) == [
        f"v1 eval: error: the model server at {url} rejected the API key (HTTP 401); check $MY_KEY, or name another variable with -k VAR"
    ]
    assert not (tmp_path / "out").exists()


def test_a_403_listing_models_is_not_fatal_but_a_403_calling_one_stops_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with provider_answering(403) as url:
        code = main(["eval", CONFIG, "-m", "m", "-b", url, "-n", "4", "-r", "1", "--output-dir", str(out), *NO_CLIENT_RETRIES])
    err = capsys.readouterr().err
    assert code == 3, err
    (line,) = error_lines(err)
    assert line.startswith("v1 eval: error: the model server rejected the API key: PermissionDeniedError: Error code: 403")
    assert f"--resume {only_run(out)}" in line


@pytest.mark.parametrize(
    ("responder", "message"),
    [
        (requiring_key("sk-right", reverser), "the model server rejected the API key: AuthenticationError"),
        (serving_only("served", reverser), "the model server has no such model or route (404)"),
    ],
    ids=["401", "model-not-found"],
)
def test_key_refused_or_model_not_found_stops_the_run(responder: Any, message: str, tmp_path: Path) -> None:
    with MockModelServer(responder, model="served") as server:
        result = v1_cli(
            "eval", CONFIG, "-m", "other", "-b", server.url, "-n", "20", "-r", "1", "-c", "2", "--max-retries", "3",
            "--output-dir", "out", *NO_CLIENT_RETRIES, cwd=tmp_path,
        )  # fmt: skip
        calls = len(server.requests)
    assert result.returncode == 3, result.stderr
    (line,) = error_lines(result.stderr)
    assert message in line and "stopped the run" in line and "--resume" in line
    # Stopped at the first failure: neither the 20 rollouts nor the 3 group retries were all tried.
    assert calls < 10
    assert "errors " in result.stderr


def test_resuming_a_run_stopped_for_its_key_redoes_the_refused_rollouts(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MockModelServer(requiring_key("sk-right", reverser), model="m") as server:
        args = ("eval", CONFIG, "-b", server.url, "-n", "6", "-r", "2", "-c", "2", "--output-dir", str(out), *NO_CLIENT_RETRIES)
        stopped = v1_cli(*args, cwd=tmp_path)
        assert stopped.returncode == 3, stopped.stderr
        run = only_run(out)
        assert {o["error"]["type"] for o in saved_lines(run)} == {"AuthenticationError"}
        # The same command (a run folder never names the URL or key variable): the variable now holds the right key.
        resumed = v1_cli(*args, "--resume", str(run), cwd=tmp_path, PRIME_API_KEY="sk-right")
    assert resumed.returncode == 0, resumed.stderr
    final = saved_lines(run)
    assert sorted((o["example_id"], o["rollout_index"]) for o in final) == [(e, i) for e in range(6) for i in range(2)]
    assert all(o["error"] is None for o in final)
    assert json.loads((run / "metadata.json").read_text())["num_errors"] == 0


def flaky_once_per_prompt() -> Any:
    """Fail the first request for each prompt with a 500, then reverse."""
    seen: set[str] = set()
    lock = threading.Lock()

    def reply(request: MockRequest) -> Reply:
        with lock:
            first = request.last_user_text not in seen
            seen.add(request.last_user_text)
        return Reply.fail(500, "overloaded") if first else reverser(request)

    return reply


def test_live_view_shows_errors_and_retries_as_they_happen(tmp_path: Path) -> None:
    with MockModelServer(flaky_once_per_prompt()) as server:
        result = v1_cli(
            "eval", CONFIG, "-m", "m", "-b", server.url, "-n", "3", "-r", "1", "--max-retries", "1",
            "--output-dir", "out", *NO_CLIENT_RETRIES, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = [line for line in result.stderr.splitlines() if re.match(r"v1 eval: example \d: ModelError", line)]
    assert len(printed) == 1  # the first of its type, with its message, as it happened
    assert "(model): InternalServerError: Error code: 500 - overloaded" in printed[0] and "retrying its group" in printed[0]
    assert "errors 0 retries 3" in result.stderr  # the live view's last state
    assert "│ retries            │ 3" in result.stdout


# -- item 10: exit status -------------------------------------------------------------------------


def half_failing(request: MockRequest) -> Reply:
    """Fail the prompts of odd length (a 500: 4 of reverse_text's first 6), reverse the others."""
    return Reply.fail(500, "boom") if len(request.last_user_text) % 2 else reverser(request)


@pytest.mark.parametrize(
    ("responder", "flags", "status", "reason", "as_process"),
    [
        (lambda request: Reply.fail(500, "down"), (), 1, "v1 eval: every rollout failed (6 of 6)", True),
        (half_failing, ("--fail-on-error", "0.6"), 1, "v1 eval: error rate 66.7% (4 of 6) is above --fail-on-error 0.6", True),
        (half_failing, (), 0, None, False),
        (half_failing, ("--fail-on-error",), 1, "v1 eval: error rate 66.7% (4 of 6) is above --fail-on-error 0", False),
        (half_failing, ("--fail-on-error", "0.7"), 0, None, False),
    ],
    ids=["all-failed", "above-rate", "some-failed", "any-error", "within-rate"],
)
def test_exit_status_follows_the_error_rate(
    responder: Any,
    flags: tuple[str, ...],
    status: int,
    reason: str | None,
    as_process: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with MockModelServer(responder) as server:
        args = ("eval", CONFIG, "-m", "m", "-b", server.url, "-n", "6", "-r", "1", "--no-save", *NO_CLIENT_RETRIES, *flags)
        if as_process:
            result = v1_cli(*args, cwd=tmp_path)
            code, out, err = result.returncode, result.stdout, result.stderr
        else:
            code = main(list(args))
            out, err = capsys.readouterr()
    assert code == status, err
    assert "errors " in out  # the table was printed either way
    if reason is not None:
        assert err.splitlines()[-1] == reason
    else:
        assert "above --fail-on-error" not in err and "every rollout failed" not in err


# -- item 11: numeric flags -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("-n", "0"), "command line: -n/--num-examples: must be at least 1, or -1 for all (got 0)"),
        (("-n", "-3"), "command line: -n/--num-examples: must be at least 1, or -1 for all (got -3)"),
        (("-r", "0"), "command line: -r/--rollouts-per-example: Input should be greater than or equal to 1 (got 0)"),
        (("-r", "-1"), "command line: -r/--rollouts-per-example: Input should be greater than or equal to 1 (got -1)"),
        (("-c", "-2"), "command line: -c/--max-concurrent: Input should be greater than or equal to 1 (got -2)"),
        (("--max-retries", "-1"), "command line: --max-retries: Input should be greater than or equal to 0 (got -1)"),
        (("--fail-on-error", "1.5"), "command line: --fail-on-error: Input should be less than or equal to 1 (got 1.5)"),
        (("--stop-grace", "0"), "command line: --stop-grace: Input should be greater than 0 (got 0.0)"),
        (("--stop-grace", "-1"), "command line: --stop-grace: Input should be greater than 0 (got -1.0)"),
        (("--stop-grace", "nan"), "command line: --stop-grace: Input should be a finite number (got nan)"),
        (("--stop-grace", "1e400"), "command line: --stop-grace: Input should be a finite number (got inf)"),
        (("--stop-grace", "1e9"), "command line: --stop-grace: Input should be less than or equal to 86400 (got 1000000000.0)"),
    ],
)
def test_numeric_flags_are_checked_up_front(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "out"
    assert main(["eval", CONFIG, "-m", "m", "-b", mock.url, "--output-dir", str(out), *flags]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"v1 eval: error: {message}"
    assert mock.requests == [] and not out.exists()


def test_bad_numbers_from_a_real_process_are_one_line(mock: MockModelServer, tmp_path: Path) -> None:
    result = v1_cli("eval", CONFIG, "-m", "m", "-b", mock.url, "-n", "0", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip().splitlines()[-1]
        == "v1 eval: error: command line: -n/--num-examples: must be at least 1, or -1 for all (got 0)"
    )
    result = v1_cli("eval", CONFIG, "-n", "two", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "v1 eval: error: argument -n/--num-examples: invalid int value: 'two' (see v1 eval --help)"


def test_more_examples_than_the_dataset_has_warns(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mock.responder = reverser
    assert main(["eval", CONFIG, "-m", "m", "-b", mock.url, "-n", "500", "-r", "1", "--no-save"]) == 0
    assert "v1 eval: warning: -n 500: reverse_text has 40 evaluation rows; evaluating all 40" in capsys.readouterr().err
    assert len(mock.requests) == 40


def test_demo_refuses_zero_and_negative_counts_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = v1_cli("demo", "-n", "0", cwd=tmp_path)  # a traceback before
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == "v1 demo: error: argument -n/--num-examples: must be at least 1, got 0 (see v1 demo --help)\n"
    for flags, option in ((("-r", "0"), "-r/--rollouts"), (("-n", "-1"), "-n/--num-examples")):
        with pytest.raises(SystemExit) as exited:
            main(["demo", *flags])
        assert exited.value.code == 2
        assert (
            capsys.readouterr().err
            == f"v1 demo: error: argument {option}: must be at least 1, got {flags[1]} (see v1 demo --help)\n"
        )


# -- item 12: resume alone, mismatches together, SIGTERM ------------------------------------------


@pytest.fixture
def gated() -> Iterator[tuple[MockModelServer, Gate]]:
    gate = Gate(open_for=6, respond=reverser)
    with MockModelServer(gate, model="mock") as server:
        yield server, gate
        gate.release()


def test_sigterm_keeps_results_and_resume_with_the_same_command_finishes_it(
    gated: tuple[MockModelServer, Gate], tmp_path: Path
) -> None:
    server, gate = gated
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "eval", CONFIG, "-b", server.url, "-n", "8", "-r", "2", "-c", "2",
         "-s", '{"max_tokens": 64}', "--output-dir", str(out)],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(
            lambda: out.exists() and any(out.iterdir()) and len(saved_lines(only_run(out))) == 6 and gate.seen > 6,
            "held calls",
            process=process,
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=HANG_S)
    finally:
        if process.poll() is None:
            process.kill()
    run = only_run(out)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == f"v1 eval: interrupted; saved rollouts are in {run}, finish with --resume {run}"
    assert len(saved_lines(run)) == 6 and json.loads((run / "metadata.json").read_text())["num_rollouts"] == 6
    gate.release()

    # Other settings beside --resume: every difference in one line, nothing run.
    before = len(server.requests)
    # (V1_EVAL_* variables count as the command's, as they override a config file's.)
    refused = v1_cli(
        "eval",
        CONFIG,
        "-b",
        server.url,
        "--resume",
        str(run),
        "-n",
        "3",
        "-s",
        '{"max_tokens": 8}',
        cwd=tmp_path,
        V1_EVAL_ROLLOUTS_PER_EXAMPLE="1",
    )
    assert refused.returncode == 2
    (line,) = error_lines(refused.stderr)
    assert line.startswith(f"v1 eval: error: --resume {run}: the saved run differs in 3 setting(s): ")
    for difference in ("num_examples (saved 8, now 3)", "rollouts_per_example (saved 2, now 1)", "sampling_args (saved"):
        assert difference in line
    assert len(server.requests) == before

    # The same command again, from another directory.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    same = ("-n", "8", "-r", "2", "-s", '{"max_tokens": 64}')
    resumed = v1_cli("eval", CONFIG, "-b", server.url, *same, "--resume", str(run), cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    final = saved_lines(run)
    assert sorted((o["example_id"], o["rollout_index"]) for o in final) == [(e, i) for e in range(8) for i in range(2)]
    assert "16 rollouts (8 examples x 2)" in resumed.stdout
    assert {request.body["max_tokens"] for request in server.requests} == {64}
    assert not (elsewhere / "outputs").exists() and only_run(out) == run


def test_resume_alone_of_a_run_without_saved_settings_says_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "old-run"
    ResultsWriter(run).write_metadata_now({"env_id": "reverse_text", "model": "m"})
    result = v1_cli("eval", "--resume", str(run), cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        f"v1 eval: error: --resume {run}: the saved run does not record its settings (an older v1 made it); "
        "pass CONFIG_OR_ENV_ID and the run's flags with --resume"
    ]
    assert main(["eval"]) == 2
    assert "pass CONFIG_OR_ENV_ID" in capsys.readouterr().err
    tampered = tmp_path / "tampered-run"
    ResultsWriter(tampered).write_metadata_now({"env_id": "reverse_text", "eval_settings": {"env": 3, "settings": []}})
    assert main(["eval", "--resume", str(tampered)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"v1 eval: error: {tampered / 'metadata.json'}: field 'eval_settings' is malformed "
        "(expected env, taskset, harness and settings); pass CONFIG_OR_ENV_ID and the run's flags with --resume"
    )


# -- item 13: --save-to-hf-hub, --version ---------------------------------------------------------


def test_a_failed_hub_upload_is_one_line_and_keeps_the_results(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = reverser
    result = v1_cli(
        "eval", CONFIG, "-m", "m", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", "out",
        "--save-to-hf-hub", "someone/results", cwd=tmp_path,
        HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), HF_TOKEN="",
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert line.startswith("v1 eval: error: --save-to-hf-hub someone/results: upload failed: ")
    assert len(saved_lines(only_run(tmp_path / "out"))) == 2


def test_version(tmp_path: Path) -> None:
    result = v1_cli("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == f"v1 {v1.__version__}\n"
