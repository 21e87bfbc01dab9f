"""`v1 eval`'s vf-eval flags (-x, -v, -d, -e with a Python registry), `EvalConfig`, and ``vf-eval`` itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.cli._eval import plan_run
from v1.cli._main import build_parser, main
from v1.env import EnvSource
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")


def reverse(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


def run_main(*args: str) -> int:
    return main(["eval", *args])


def only_run(output_dir: Path) -> Path:
    (run,) = list(output_dir.iterdir())
    return run


def plan_for(*args: str) -> Any:
    parsed, extra = build_parser().parse_known_args(["eval", *args])
    parsed.extra = extra
    return plan_run(parsed)


def test_extra_env_kwargs_reach_the_env_and_are_saved_for_resume(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = reverse
    out = tmp_path / "out"
    code = run_main(
        CONFIG, "-m", "mock", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", str(out), "-x", '{"max_seq_len": 5}'
    )
    assert code == 0
    run = only_run(out)
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [row["stop_condition"] for row in rows] == ["prompt_too_long", "prompt_too_long"]  # a 5-token context limit
    saved = json.loads((run / "metadata.json").read_text())["eval_settings"]["settings"]
    assert saved["extra_env_kwargs"] == {"max_seq_len": 5} and "verbose" not in saved and "debug" not in saved


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"concurrency": "many"}',
            "-x/--extra-env-kwargs: 'concurrency': bad value 'many': set_concurrency: expected an integer",
        ),
        ("{not json", "-x/--extra-env-kwargs: expected a JSON object, got '{not json'"),
        ("[1, 2]", "-x/--extra-env-kwargs: expected a JSON object, got list"),
        ("", "-x/--extra-env-kwargs: expected a JSON object"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "-x/--extra-env-kwargs: expected a JSON object"),
    ],
    ids=["bad value", "not json", "a list", "empty", "deeply nested"],
)
def test_bad_extra_env_kwargs_are_one_line_exit_2_nothing_written(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str
) -> None:
    out = tmp_path / "out"
    code = run_main(CONFIG, "-m", "mock", "-b", mock.url, "--output-dir", str(out), "-x", value)
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and err.count("\n") == 0 and len(err) < 500, err
    assert not out.exists() and mock.requests == []


@pytest.mark.parametrize(
    "key", ["bogus", "set_kwargs", "taskset", "__dict__", "interleaved_rollouts"], ids=lambda key: key.strip("_") or key
)
def test_an_extra_env_kwarg_that_is_no_setting_is_ignored_with_one_warning(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """A command line copied from vf-eval runs: the key is named, said to be ignored, and nothing is set or saved for Ray."""
    mock.responder = reverse
    out = tmp_path / "out"
    code = run_main(CONFIG, "-m", "mock", "-b", mock.url, "-n", "1", "-r", "1", "--output-dir", str(out), "-x", f'{{"{key}": 1}}')
    err = capsys.readouterr().err
    assert code == 0, err
    [warning] = [line for line in err.splitlines() if "-x/--extra-env-kwargs" in line]
    assert warning.startswith(f"v1 eval: warning: -x/--extra-env-kwargs: '{key}' is not a setting of Env 'reverse_text': ignored")
    assert "max_seq_len" in warning  # what it could have set instead
    assert len(mock.requests) == 1


def test_a_python_endpoint_registry_resolves_like_the_toml_one(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mock.responder = reverse
    registry = tmp_path / "endpoints.py"
    registry.write_text(
        "import os\n"
        f"URL = {mock.url!r}\n"
        "ENDPOINTS = {\n"
        '    "local": {"model": "served-name", "url": URL, "key": "MOCK_API_KEY"},\n'
        '    "pair": [{"model": "m2", "url": URL, "key": "MOCK_API_KEY"}, {"model": "m2", "url": URL, "key": "MOCK_API_KEY"}],\n'
        "}\n"
    )
    monkeypatch.setenv("MOCK_API_KEY", "sk-py-registry")
    assert run_main(CONFIG, "-m", "local", "-e", str(registry), "-n", "1", "-r", "1", "--no-save") == 0
    (request,) = mock.requests
    assert request.body["model"] == "served-name" and request.headers["Authorization"] == "Bearer sk-py-registry"
    plan = plan_for(CONFIG, "-m", "pair", "-e", str(registry), "-n", "1", "--no-save")
    assert plan.config.endpoint_id == "pair" and plan.config.model == "m2"
    assert len(plan.config.client_config.endpoint_configs) == 2


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("raise RuntimeError('no registry for you')\n", "running it failed: RuntimeError: no registry for you"),
        ("import sys\nsys.exit(3)\n", "running it failed: SystemExit: 3"),
        ("def broken(:\n", "running it failed: SyntaxError"),
        ("OTHER = {}\n", "expected a dict ENDPOINTS"),
        ("ENDPOINTS = [1]\n", "expected a dict ENDPOINTS"),
        ("ENDPOINTS = {1: {}}\n", "expected a dict ENDPOINTS"),
        ('ENDPOINTS = {"local": {"model": "m"}}\n', "field 'local.url'"),
        ('ENDPOINTS = {"local": "http://x"}\n', "field 'local': expected a table"),
    ],
)
def test_bad_python_registries_are_one_line_exit_2(
    mock: MockModelServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, message: str
) -> None:
    registry = tmp_path / "endpoints.py"
    registry.write_text(source)
    out = tmp_path / "out"
    assert run_main(CONFIG, "-m", "local", "-e", str(registry), "--output-dir", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0, err
    assert not out.exists() and mock.requests == []


def test_the_run_is_an_eval_config(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = reverse
    args = (CONFIG, "-m", "mock", "-b", mock.url, "-n", "3", "-r", "2", "-c", "4", "-s", '{"max_tokens": 9}')
    plan = plan_for(*args, "--output-dir", str(tmp_path), "--taskset.system_prompt", "S", "-x", '{"max_seq_len": 99}', "-v")
    config = plan.config
    assert isinstance(config, vf.EvalConfig)
    assert (config.env_id, config.model, config.endpoint_id) == ("reverse_text", "mock", None)
    assert (config.num_examples, config.rollouts_per_example, config.max_concurrent) == (3, 2, 4)
    assert config.sampling_args == {"max_tokens": 9} and config.client_config.api_base_url == mock.url
    assert config.env_args == {"taskset": {"system_prompt": "S"}} and config.extra_env_kwargs == {"max_seq_len": 99}
    assert config.verbose and config.save_results and not config.save_to_hf_hub and config.resume_path is None
    assert plan.env.harness.config.max_seq_len == 99
    assert plan.env.source.env_kwargs == {"max_seq_len": 99}  # Ray actors load the env again from its source
    assert EnvSource(CONFIG, env_kwargs={"max_seq_len": 7}).load().harness.config.max_seq_len == 7


def test_eval_config_fields_and_limits() -> None:
    config = vf.EvalConfig(env_id="e", model="m")
    assert (config.num_examples, config.rollouts_per_example, config.max_concurrent, config.max_retries) == (5, 3, 32, 0)
    assert config.extra_env_kwargs == {} and config.state_columns is None and config.hf_hub_dataset_name is None
    for field, value in [("num_examples", 0), ("num_examples", -2), ("rollouts_per_example", 0), ("max_concurrent", -1)]:
        with pytest.raises(ValueError, match=field):
            vf.EvalConfig(env_id="e", model="m", **{field: value})
    with pytest.raises(ValueError, match="bogus"):
        vf.EvalConfig(env_id="e", model="m", bogus=1)  # type: ignore[call-arg]
    assert vf.EvalConfig(env_id="e", model="m", num_examples=-1).num_examples == -1


def test_vf_eval_standalone_verbose_and_debug_log_plain_lines(mock: MockModelServer, tmp_path: Path) -> None:
    mock.responder = reverse
    command = [sys.executable, "-m", "v1.cli._eval", CONFIG, "-m", "mock", "-b", mock.url, "-n", "2", "-r", "1", "--no-save"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VF_LOG_LEVEL", None)
    result = subprocess.run([*command, "-v", "-d"], capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert " - DEBUG - " in result.stderr and "2/2 rollouts, reward 1.000" in result.stderr
    assert "━" not in result.stderr  # -d: no progress bar
    assert "v1 eval: reverse_text x mock: 2 rollouts" in result.stdout
    plain = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path, env=env)
    assert plain.returncode == 0 and " - DEBUG - " not in plain.stderr and "rollouts, reward" not in plain.stderr
    bad = subprocess.run(
        [*command, "--bogus"], capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path, env={**env, "VF_LOG_LEVEL": "chatty"}
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    level = subprocess.run(
        command, capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path, env={**env, "VF_LOG_LEVEL": "chatty"}
    )
    assert level.returncode == 2 and "environment variable VF_LOG_LEVEL: unknown log level 'chatty'" in level.stderr
    assert level.stderr.strip().count("\n") == 0


def test_extra_env_kwargs_reach_ray_actors(mock: MockModelServer, tmp_path: Path) -> None:
    """The actors load the environment again from its source: -x travels with it (unscored rollouts on the actor)."""
    pytest.importorskip("ray")  # the [distributed] extra, pulled by [test]
    mock.responder = reverse
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "v1.cli",
        "eval",
        CONFIG,
        "-b",
        mock.url,
        "-n",
        "2",
        "-r",
        "1",
        "--output-dir",
        str(out),
    ]
    ray = ["--ray", "--ray-actors", "1", "-x", '{"score_rollouts": false}']
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([*command, *ray], capture_output=True, text=True, timeout=HANG_S, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (only_run(out) / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["reward"] is None and not row.get("metrics") for row in rows), rows
