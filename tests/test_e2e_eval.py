"""End to end: `v1 eval` as a real process against the mock model server, killed, interrupted and resumed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tools.gate import Gate
from tests.tools.patience import HANG_S, wait_until
from v1.cli import main
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")
AGGREGATES = (
    "avg_reward",
    "avg_metrics",
    "avg_error",
    "pass_at_k",
    "pass_all_k",
    "usage",
    "total_usage",
    "num_rollouts",
    "num_errors",
    "error_types",
    "stop_conditions",
    "num_retries",
    "num_examples",
    "rollouts_per_example",
    "env_id",
    "model",
    "sampling_args",
)


def policy(request: MockRequest) -> Reply:
    """Deterministic per prompt (so runs are comparable): exact for even lengths, one char short otherwise."""
    text = request.last_user_text[::-1]
    return Reply.text(text if len(text) % 2 == 0 else text[1:])


@pytest.fixture
def gated() -> Iterator[tuple[MockModelServer, Gate]]:
    gate = Gate(open_for=24, respond=policy)
    with MockModelServer(gate, model="mock") as server:
        yield server, gate
        gate.release()


def eval_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "v1.cli", "eval", *args]


DEFAULT_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"


def as_terminal_job(command: list[str]) -> list[str]:
    """`command`, started with SIGINT at its default, as a terminal's foreground job has it.

    A test runner started in the background by a shell without job control ignores SIGINT, its children
    inherit that, and a Python program started ignoring SIGINT keeps ignoring it: Ctrl-C would never arrive.
    """
    return [sys.executable, "-c", DEFAULT_SIGINT, *command]


@contextlib.contextmanager
def ignoring_sigint() -> Iterator[None]:
    """This process ignores SIGINT while inside, as a test runner started in the background of a script does."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def saved_lines(run: Path) -> list[dict[str, Any]]:
    path = run / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def only_run(output_dir: Path) -> Path:
    runs = list(output_dir.iterdir()) if output_dir.exists() else []
    assert len(runs) == 1, runs
    return runs[0]


def test_eval_end_to_end_killed_then_resumed(gated: tuple[MockModelServer, Gate], tmp_path: Path) -> None:
    server, gate = gated
    out = tmp_path / "out"
    # No -m: the model is the one the server says it serves (GET /v1/models).
    args = (CONFIG, "-b", server.url, "-n", "20", "-r", "3", "-c", "6", "--output-dir", str(out))
    process = subprocess.Popen(eval_command(*args), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: out.exists() and any(out.iterdir()), "the run folder", process=process)
        run = only_run(out)
        # 24 requests pass (8 groups of 3); the next ones are held, so the run is surely mid-way.
        wait_until(lambda: len(saved_lines(run)) == 24 and gate.seen > 24, "8 saved groups and a held request", process=process)
        assert process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL
    saved = saved_lines(run)
    assert len(saved) == 24
    # What a kill at a worse moment leaves: part of an unfinished group, and a half-written line.
    done = {o["example_id"] for o in saved}
    unfinished = next(e for e in range(20) if e not in done)
    partial = {**saved[0], "example_id": unfinished, "rollout_index": 0}
    with (run / "results.jsonl").open("a") as results:
        results.write(json.dumps(partial) + "\n" + json.dumps(saved[1])[:50])
    gate.release()

    resumed = subprocess.run(
        eval_command(*args, "--resume", str(run)), cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S
    )
    assert resumed.returncode == 0, resumed.stderr
    final = saved_lines(run)
    keys = [(o["example_id"], o["rollout_index"]) for o in final]
    assert len(final) == 60 and len(set(keys)) == 60
    assert set(keys) == {(e, i) for e in range(20) for i in range(3)}
    assert (run / "results.jsonl").read_text().endswith("}\n")
    assert only_run(out) == run  # resume wrote into the same folder, no new one
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["num_rollouts"] == 60 and metadata["num_examples"] == 20 and metadata["rollouts_per_example"] == 3
    assert metadata["model"] == "mock" and {request.body["model"] for request in server.requests} == {"mock"}
    assert "60 rollouts (20 examples x 3)" in resumed.stdout
    assert "60/60" in resumed.stderr and "rollouts/s" in resumed.stderr and "errors 0" in resumed.stderr  # the live view
    assert "v1 eval: warning: reverse_text has no eval split" in resumed.stderr

    # The same eval uninterrupted: every aggregate matches the resumed run's.
    fresh_out = tmp_path / "fresh"
    fresh = subprocess.run(eval_command(*args[:-1], str(fresh_out)), cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S)
    assert fresh.returncode == 0, fresh.stderr
    uninterrupted = json.loads((only_run(fresh_out) / "metadata.json").read_text())
    assert {k: metadata[k] for k in AGGREGATES} == {k: uninterrupted[k] for k in AGGREGATES}
    assert 0 < metadata["avg_metrics"]["exact"] < 1 and metadata["num_errors"] == 0
    table_lines = [line for line in resumed.stdout.splitlines() if "reward (mean)" in line or "pass (" in line]
    assert table_lines == [line for line in fresh.stdout.splitlines() if "reward (mean)" in line or "pass (" in line]


CLEANUP_ENV = """
import os


def mark(state) -> None:
    with open(os.environ["MARKER_FILE"], "a") as marker:
        marker.write(f"{state['example_id']}\\n")
"""


def test_ctrl_c_stops_cleanly_runs_cleanups_and_keeps_what_was_saved(gated: tuple[MockModelServer, Gate], tmp_path: Path) -> None:
    server, gate = gated
    (tmp_path / "marker_env.py").write_text(CLEANUP_ENV)
    config = tmp_path / "env.toml"
    config.write_text(
        Path(CONFIG).read_text() + '\n[[env.taskset.cleanups]]\nfn = "marker_env:mark"\n',
    )
    marker = tmp_path / "marker.txt"
    env = {
        **os.environ,
        "MARKER_FILE": str(marker),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYTHONFAULTHANDLER": "1",  # a hang below is ended with SIGABRT, which then prints every thread's stack
    }
    out = tmp_path / "out"
    command = eval_command(
        str(config), "-m", "mock", "-b", server.url, "-n", "20", "-r", "3", "-c", "6", "--output-dir", str(out)
    )
    with ignoring_sigint():  # the parent's own SIGINT must not decide whether the user's Ctrl-C arrives
        process = subprocess.Popen(
            as_terminal_job(command), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        wait_until(
            lambda: out.exists() and any(out.iterdir()) and len(saved_lines(only_run(out))) == 24 and gate.seen >= 30,
            "held requests",
            process=process,
        )
        process.send_signal(signal.SIGINT)
        stderr = stopped(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    run = only_run(out)
    assert "interrupted" in stderr and f"--resume {run}" in stderr
    saved = saved_lines(run)
    assert len(saved) == 24
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["num_rollouts"] == 24
    cleaned = marker.read_text().split()
    assert len(cleaned) == 30  # 24 finished rollouts and the 6 in flight when Ctrl-C came
    assert not list(run.glob("*.tmp"))


STUCK_CLEANUP_ENV = """
import os
import threading
from pathlib import Path


def mark(state) -> None:
    with open(os.environ["MARKER_FILE"], "a") as marker:
        marker.write(f"{state['example_id']}\\n")
    if Path(os.environ["STUCK_FILE"]).exists():  # a cleanup stuck for good (on a lock, a dead server, a held model call)
        threading.Event().wait()


def stuck_reward(state) -> float:
    with open(os.environ["MARKER_FILE"], "a") as marker:
        marker.write("scoring\\n")
    threading.Event().wait()  # a grader stuck for good
    return 1.0


def stuck_rows():
    Path(os.environ["STUCK_FILE"]).write_text("planning")
    threading.Event().wait()
"""


def start_stuck_eval(
    server: MockModelServer, tmp_path: Path, *flags: str, source: str | None = None, reward: bool = False
) -> subprocess.Popen[str]:
    """`v1 eval` whose cleanups block for good once ``stuck`` exists (with `source`: whose rows never load;
    with `reward`: whose every rollout's scoring blocks for good)."""
    (tmp_path / "stuck_env.py").write_text(STUCK_CLEANUP_ENV)
    config_text = Path(CONFIG).read_text() + '\n[[env.taskset.cleanups]]\nfn = "stuck_env:mark"\n'
    if reward:
        config_text += '\n[[env.taskset.rewards]]\nfn = "stuck_env:stuck_reward"\n'
    if source is not None:
        config_text = config_text.replace('"tasksets.reverse_text:load_rows"', f'"{source}"')
    config = tmp_path / "env.toml"
    config.write_text(config_text)
    env = {
        **os.environ,
        "MARKER_FILE": str(tmp_path / "marker.txt"),
        "STUCK_FILE": str(tmp_path / "stuck"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYTHONFAULTHANDLER": "1",
    }
    command = eval_command(str(config), "-m", "mock", "-b", server.url, "-n", "20", "-r", "3", "-c", "6", *flags)
    return subprocess.Popen(
        as_terminal_job(command), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stopped(process: subprocess.Popen[str]) -> str:
    """The stderr of a process that must exit by itself now; its stacks (SIGABRT) if it hangs instead."""
    try:
        return process.communicate(timeout=HANG_S)[1]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        _, stderr = process.communicate(timeout=60)
        pytest.fail(f"v1 eval did not stop within {HANG_S:g} s; where it waited:\n{stderr[-20000:]}")


def interrupt_while_cleanups_are_stuck(gate: Gate, tmp_path: Path, process: subprocess.Popen[str]) -> Path:
    """Ctrl-C once 8 groups are saved and 6 calls held, with every cleanup from then on stuck for good."""
    out = tmp_path / "out"
    wait_until(
        lambda: out.exists() and any(out.iterdir()) and len(saved_lines(only_run(out))) == 24 and gate.seen >= 30,
        "held requests",
        process=process,
    )
    (tmp_path / "stuck").write_text("")
    process.send_signal(signal.SIGINT)
    return only_run(out)


def test_ctrl_c_gives_up_on_stuck_cleanups_after_the_stop_grace(gated: tuple[MockModelServer, Gate], tmp_path: Path) -> None:
    server, gate = gated
    process = start_stuck_eval(server, tmp_path, "--stop-grace", "3", "--output-dir", str(tmp_path / "out"))
    try:
        run = interrupt_while_cleanups_are_stuck(gate, tmp_path, process)
        stderr = stopped(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert "v1 eval: stopping: cancelling the rollouts in flight and running their cleanups" in stderr
    assert lines[-1] == (
        "v1 eval: interrupted; gave up after 3 s waiting for the rollouts in flight to stop and run their cleanups; "
        f"saved rollouts are in {run}, finish with --resume {run}"
    )
    assert len(saved_lines(run)) == 24


def test_a_second_ctrl_c_exits_at_once_while_cleanups_are_stuck(gated: tuple[MockModelServer, Gate], tmp_path: Path) -> None:
    server, gate = gated
    process = start_stuck_eval(server, tmp_path, "--output-dir", str(tmp_path / "out"))
    marker = tmp_path / "marker.txt"
    try:
        run = interrupt_while_cleanups_are_stuck(gate, tmp_path, process)
        # The 6 rollouts in flight were cancelled and their cleanups started (and are stuck): Ctrl-C again.
        wait_until(lambda: len(marker.read_text().split()) == 30, "the stuck cleanups", process=process)
        process.send_signal(signal.SIGINT)
        stderr = stopped(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        "v1 eval: interrupted; SIGINT again: exiting now without waiting for the rollouts in flight to stop and run "
        f"their cleanups; saved rollouts are in {run}, finish with --resume {run}"
    )
    assert len(saved_lines(run)) == 24


def test_ctrl_c_gives_up_on_sync_user_code_still_running_after_the_run_stopped(
    gated: tuple[MockModelServer, Gate], tmp_path: Path
) -> None:
    server, _ = gated
    marker = tmp_path / "marker.txt"
    process = start_stuck_eval(server, tmp_path, "--stop-grace", "3", "--output-dir", str(tmp_path / "out"), reward=True)
    try:
        # 6 rollouts in flight, each scoring in a worker thread that never returns: cancelling their
        # tasks leaves the threads running, which the interpreter would wait for on its way out.
        wait_until(lambda: marker.exists() and marker.read_text().split().count("scoring") == 6, "scoring", process=process)
        process.send_signal(signal.SIGINT)
        stderr = stopped(process)
    finally:
        if process.poll() is None:
            process.kill()
    run = only_run(tmp_path / "out")
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        "v1 eval: interrupted; gave up after 3 s waiting for 6 call(s) of sync user code in worker threads; "
        f"saved rollouts are in {run}, finish with --resume {run}"
    )
    assert len([line for line in marker.read_text().split() if line != "scoring"]) == 6  # the cleanups ran


def test_ctrl_c_while_planning_is_one_line(gated: tuple[MockModelServer, Gate], tmp_path: Path) -> None:
    server, _ = gated
    process = start_stuck_eval(server, tmp_path, "--output-dir", str(tmp_path / "out"), source="stuck_env:stuck_rows")
    try:
        wait_until((tmp_path / "stuck").exists, "the rows to start loading", process=process)
        process.send_signal(signal.SIGINT)
        stderr = stopped(process)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "v1 eval: interrupted before the run started; nothing ran"
    assert "Traceback" not in stderr


def run_main(*args: str) -> int:
    return main(["eval", *args])


def test_settings_come_from_file_then_environment_then_flags(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mock.responder = policy
    common = (CONFIG, "-m", "mock", "-b", mock.url, "-r", "1", "--no-save")
    assert run_main(*common) == 0
    assert len(mock.requests) == 20  # [eval] num_examples = 20 in the file
    mock.reset()
    monkeypatch.setenv("V1_EVAL_NUM_EXAMPLES", "4")
    assert run_main(*common) == 0
    assert len(mock.requests) == 4
    mock.reset()
    assert run_main(*common, "-n", "2", "-s", '{"temperature": 0.5, "max_tokens": 7}') == 0
    assert len(mock.requests) == 2 and mock.requests[0].body["temperature"] == 0.5 and mock.requests[0].body["max_tokens"] == 7
    assert "2 rollouts (2 examples x 1)" in capsys.readouterr().out
    assert not (tmp_path / "outputs").exists()


def test_taskset_and_harness_flags_override_the_environment(mock: MockModelServer, capsys: pytest.CaptureFixture[str]) -> None:
    mock.responder = policy
    code = run_main(
        CONFIG, "-m", "mock", "-b", mock.url, "-n", "1", "-r", "1", "--no-save",
        "--taskset.system_prompt", "Say it backwards.", "--harness.sampling_args", '{"temperature": 0.9}',
    )  # fmt: skip
    assert code == 0
    (request,) = mock.requests
    assert request.body["messages"][0] == {"role": "system", "content": "Say it backwards."}
    assert request.body["temperature"] == 0.9


def test_endpoint_aliases_resolve_url_model_and_key(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mock.responder = policy
    registry = tmp_path / "endpoints.toml"
    registry.write_text(f'[local]\nmodel = "served-name"\nurl = "{mock.url}"\nkey = "MOCK_API_KEY"\n')
    monkeypatch.setenv("MOCK_API_KEY", "sk-mock-123")
    assert run_main(CONFIG, "-m", "local", "-e", str(registry), "-n", "1", "-r", "1", "--no-save") == 0
    (request,) = mock.requests
    assert request.body["model"] == "served-name"
    assert request.headers["Authorization"] == "Bearer sk-mock-123"
    monkeypatch.delenv("MOCK_API_KEY")
    assert run_main(CONFIG, "-m", "local", "-e", str(registry), "-n", "1", "--no-save") == 2
    assert "API key variable MOCK_API_KEY is not set" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("old", "new", "flags", "message"),
    [
        ("[eval]\n", "[eval]\nbogus = 1\n", (), "field 'eval.bogus': unknown field"),
        ("num_examples = 20", "num_examples = 'many'", (), "field 'eval.num_examples': Input should be a valid integer"),
        ("", "", ("-s", "{not json"), "-s/--sampling-args: expected a JSON object"),
        (
            'fn = "tasksets.reverse_text:exact"',
            'fn = "nowhere:f"',
            (),
            "field 'env.taskset.metrics[0].fn': cannot import module 'nowhere'",
        ),
        ("", "", ("-k", "V1_TEST_UNSET_KEY"), "API key variable V1_TEST_UNSET_KEY is not set"),
        ("", "", ("--taskset.nonsense", "1"), "field 'env.taskset.nonsense': unknown field"),
        ("", "", ("--resume", "/nonexistent/run"), "no metadata.json there"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(
    mock: MockModelServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    flags: tuple[str, ...],
    message: str,
) -> None:
    config = tmp_path / "env.toml"
    base = Path(CONFIG).read_text()
    assert old in base
    config.write_text(base.replace(old, new, 1) if old else base)
    out = tmp_path / "out"
    code = run_main(str(config), "-m", "mock", "-b", mock.url, "--output-dir", str(out), *flags)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and err.count("\n") == 0, err
    assert not out.exists() and mock.requests == []


def test_bad_ids_and_aliases(mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(CONFIG, "-b", "http://127.0.0.1:9/v1") == 3
    assert "cannot connect to the model server at http://127.0.0.1:9/v1 (connection refused)" in capsys.readouterr().err
    with MockModelServer(responder=policy) as unlisted:
        unlisted.model = "a"
        assert run_main(CONFIG, "-b", unlisted.url, "-n", "1", "-r", "1", "--no-save") == 0
        assert {request.body["model"] for request in unlisted.requests} == {"a"}
    assert run_main("no_such_env_xyz", "-m", "mock", "-b", mock.url) == 2
    assert "unknown environment 'no_such_env_xyz': no module" in capsys.readouterr().err
    registry = tmp_path / "endpoints.toml"
    registry.write_text('[known]\nmodel = "m"\nurl = "http://127.0.0.1:9/v1"\n')
    assert run_main(CONFIG, "-m", "unknown-alias", "-e", str(registry)) == 2
    assert f"no endpoint 'unknown-alias' in {registry} (known: known)" in capsys.readouterr().err
    registry.write_text('[known]\nmodel = "m"\nurl = 3\n')
    assert run_main(CONFIG, "-m", "known", "-e", str(registry)) == 2
    assert f"{registry}: field 'known.url': Input should be a valid string" in capsys.readouterr().err


def test_bad_input_exit_code_from_a_real_process(tmp_path: Path) -> None:
    config = tmp_path / "env.toml"
    config.write_text(textwrap.dedent("[env.harness]\nmax_turns = 0\n"))
    result = subprocess.run(
        eval_command(str(config), "-m", "m", "-b", "http://127.0.0.1:9/v1"), capture_output=True, text=True, timeout=HANG_S
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"v1 eval: error: {config}: field 'env.harness.max_turns': Input should be greater than or equal to 1 (got 0)"
    )
    assert not (tmp_path / "outputs").exists()


def test_endpoint_variants_are_used_round_robin(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = policy
    with MockModelServer(policy) as second:
        registry = tmp_path / "endpoints.toml"
        registry.write_text("".join(f'[[pair]]\nmodel = "served"\nurl = "{url}"\n' for url in (mock.url, second.url)))
        assert run_main(CONFIG, "-m", "pair", "-e", str(registry), "-n", "4", "-r", "2", "--no-save") == 0
        assert len(mock.requests) == 4 and len(second.requests) == 4
        assert {r.body["model"] for r in mock.requests + second.requests} == {"served"}


def test_a_bad_task_row_is_bad_input(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad_rows_env.py").write_text('def rows():\n    return [{"prompt": [{"role": "system", "content": "no"}]}]\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "env.toml"
    config.write_text('[env.taskset]\nsource = "bad_rows_env:rows"\n')
    out = tmp_path / "out"
    assert run_main(str(config), "-m", "m", "-b", mock.url, "--output-dir", str(out)) == 2
    err = capsys.readouterr().err
    assert "system messages are not allowed" in err and "row 0" in err
    assert not out.exists() and mock.requests == []


def test_resume_refuses_other_settings(mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.responder = policy
    out = tmp_path / "out"
    assert run_main(CONFIG, "-m", "mock", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", str(out)) == 0
    run = only_run(out)
    before = (run / "results.jsonl").read_text()
    capsys.readouterr()
    assert run_main(CONFIG, "-m", "mock", "-b", mock.url, "-n", "2", "-r", "2", "--resume", str(run)) == 2
    assert "the saved run differs in 1 setting(s): rollouts_per_example (saved 1, now 2)" in capsys.readouterr().err
    assert (run / "results.jsonl").read_text() == before
    # The same settings: nothing to redo, nothing duplicated.
    mock.reset()
    assert run_main(CONFIG, "-m", "mock", "-b", mock.url, "-n", "2", "-r", "1", "--resume", str(run)) == 0
    assert mock.requests == [] and (run / "results.jsonl").read_text() == before
