"""`v1 eval` with the command lines users bring from `vf-eval`: `-a/--env-args`, `-x` options the environment
doesn't take, `OPENAI_BASE_URL`, and no `-m` at all. Real `v1 eval` runs against the mock model server."""

from __future__ import annotations

from pathlib import Path

import pytest

from v1.cli import main
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "configs" / "reverse_text.toml")

ENV_MODULE = """
import v1 as vf


def load_environment(word: str = "unset", repeat: int = 1) -> vf.Environment:
    return vf.SingleTurnEnv(dataset=[{"question": word * repeat, "answer": word}], env_id="habits")
"""


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@pytest.fixture(autouse=True)
def user_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean shell in a fresh folder holding an environment module, as a user's project would."""
    for variable in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "PRIME_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    (tmp_path / "habits_env.py").write_text(ENV_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)


def v1_eval(*args: str) -> int:
    return main(["eval", *args])


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("v1 eval: error")]


def test_env_args_reach_load_environment(mock: MockModelServer, capsys: pytest.CaptureFixture[str]) -> None:
    mock.responder = reverser
    code = v1_eval(
        "habits_env", "-m", "m", "-b", mock.url, "-n", "1", "-r", "1", "--no-save", "-a", '{"word": "ab", "repeat": 3}'
    )
    assert code == 0, capsys.readouterr().err
    assert [request.last_user_text for request in mock.requests] == ["ababab"]
    mock.reset()
    code = v1_eval("habits_env", "-m", "m", "-b", mock.url, "-n", "1", "-r", "1", "--no-save", "--env-args", '{"word": "z"}')
    assert code == 0 and [request.last_user_text for request in mock.requests] == ["z"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{", "command line: -a/--env-args: expected a JSON object, got '{'"),
        ("[1, 2]", "command line: -a/--env-args: expected a JSON object, got list '[1, 2]'"),
        ("[" * 100_000, "command line: -a/--env-args: expected a JSON object"),
        ('{"word": ' + "9" * 100_000 + "}", "command line: -a/--env-args: expected a JSON object"),
        ('{"colour": "red"}', "habits_env: habits_env:load_environment refused env_args ['colour']"),
        (
            '{"repeat": "x"}',
            "command line: -a/--env-args: habits_env's load_environment(**{'repeat': 'x'}) raised TypeError: can't multiply",
        ),
    ],
    ids=["malformed", "not-an-object", "deep", "huge-number", "unknown-keyword", "refused-value"],
)
def test_bad_env_args_are_one_line_and_exit_2(
    mock: MockModelServer, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    assert v1_eval("habits_env", "-m", "m", "-b", mock.url, "-n", "1", "--no-save", "-a", value) == 2
    err = capsys.readouterr().err
    [line] = error_lines(err)
    assert line.startswith(f"v1 eval: error: {expected}"), line
    assert len(line) < 400 and err.count("\n") == 1, err
    assert mock.requests == []


def test_env_args_on_a_toml_config_say_what_to_use_instead(mock: MockModelServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert v1_eval(CONFIG, "-m", "m", "-b", mock.url, "-a", '{"word": "x"}') == 2
    [line] = error_lines(capsys.readouterr().err)
    assert "-a/--env-args" in line and "--taskset.FIELD" in line, line


def test_an_extra_env_kwarg_the_environment_does_not_take_is_a_warning(
    mock: MockModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    mock.responder = reverser
    code = v1_eval(CONFIG, "-m", "m", "-b", mock.url, "-n", "1", "-r", "1", "--no-save", "-x", '{"interleaved_rollouts": true}')
    err = capsys.readouterr().err
    assert code == 0, err
    [warning] = [line for line in err.splitlines() if "interleaved_rollouts" in line]
    assert warning.startswith("v1 eval: warning: -x/--extra-env-kwargs: 'interleaved_rollouts' is not a setting of "), warning
    assert "ignored" in warning
    assert len(mock.requests) == 1


def test_openai_base_url_and_key_are_where_eval_calls(mock: MockModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    mock.responder = reverser
    monkeypatch.setenv("OPENAI_BASE_URL", mock.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    assert v1_eval(CONFIG, "-m", "some-model", "-n", "1", "-r", "1", "--no-save") == 0
    [request] = mock.requests
    assert request.body["model"] == "some-model" and request.headers["Authorization"] == "Bearer sk-user"


def test_no_model_runs_the_default_model_and_says_so(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As vf-eval: no -m is `openai/gpt-4.1-mini`, looked up in the endpoint registry like any -m."""
    mock.responder = reverser
    monkeypatch.setenv("MOCK_KEY", "sk-mock")
    registry = tmp_path / "endpoints.toml"
    registry.write_text(f'["openai/gpt-4.1-mini"]\nmodel = "served-default"\nurl = "{mock.url}"\nkey = "MOCK_KEY"\n')
    code = v1_eval(CONFIG, "-e", str(registry), "-n", "1", "-r", "1", "--no-save")
    err = capsys.readouterr().err
    assert code == 0, err
    said = f"v1 eval: model openai/gpt-4.1-mini at {mock.url} (the default; choose another with -m MODEL)"
    assert said in err.splitlines(), err
    assert [request.body["model"] for request in mock.requests] == ["served-default"]


def test_the_default_model_is_named_when_its_server_cannot_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "endpoints.toml"
    registry.write_text('["openai/gpt-4.1-mini"]\nmodel = "gpt-4.1-mini"\nurl = "http://127.0.0.1:9/v1"\n')
    assert v1_eval(CONFIG, "-e", str(registry), "-n", "1", "--no-save") == 3
    [line] = error_lines(capsys.readouterr().err)
    assert line.startswith("v1 eval: error: cannot connect to the model server at http://127.0.0.1:9/v1"), line
    assert line.endswith("(model openai/gpt-4.1-mini at http://127.0.0.1:9/v1 (the default; choose another with -m MODEL))"), line
