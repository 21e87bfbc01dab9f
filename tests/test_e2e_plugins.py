"""Plugins from separately installed packages, named in TOML and on the command line of a real `v1 eval`.

Each fixture package under tests/fixtures/plugins is installed offline with pip into a folder of its
own, as `pip install some-backend` would install it, and that folder is put on the CLI's PYTHONPATH.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.registry import CLIENT_TYPES, SANDBOX_BACKENDS, Registry
from v1.sandbox import LocalBackend, get_backend
from v1.testing import MockModelServer

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "tests" / "fixtures" / "plugins"

TOML = '''
[env.taskset]
loader = "tagged-words"

[env.harness]
max_turns = 1
timeout_seconds = 60

[env.harness.program]
command = ["python", "agent.py"]
bindings = {{ "files.messages.json" = "state.prompt" }}
artifacts = ["backend.txt"]

[env.harness.program.files]
"agent.py" = """
import json, os
import openai

messages = json.load(open("messages.json"))
answer = openai.OpenAI().chat.completions.create(model=os.environ["V1_MODEL"], messages=messages)
open("backend.txt", "w").write(os.environ.get("V1_PLUGIN_BACKEND", "not the plugin"))
"""

[env.harness.sandbox]
backend = "{backend}"
memory_gb = 1
disk_size_gb = 1
timeout_minutes = 10
'''


def pip_install(package: str, target: Path, work: Path) -> None:
    """Install a fixture package offline into `target`, building from a copy so the repository stays clean."""
    source = work / package
    shutil.copytree(PLUGINS / package, source)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, "--target", str(target), str(source)], check=True, capture_output=True, timeout=HANG_S)


@pytest.fixture(scope="module")
def tagged_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the v1-tagged-backend package is installed."""
    target = tmp_path_factory.mktemp("tagged-site")
    pip_install("v1_tagged_backend", target, tmp_path_factory.mktemp("build"))
    return target


@pytest.fixture(scope="module")
def bad_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the v1-bad-plugins package is installed."""
    target = tmp_path_factory.mktemp("bad-site")
    pip_install("v1_bad_plugins", target, tmp_path_factory.mktemp("build"))
    return target


def v1_eval(*args: str, sites: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([*map(str, sites), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "V1_SANDBOX_ROOT": str(cwd / "sandboxes")}
    command = [sys.executable, "-m", "v1.cli", "eval", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_S)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("v1 eval: error")]


def outputs(folder: Path) -> list[dict[str, object]]:
    [run] = list(folder.iterdir())
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def write_env(tmp_path: Path, backend: str) -> Path:
    path = tmp_path / "env.toml"
    path.write_text(TOML.format(backend=backend))
    return path


@pytest.mark.parametrize("backend", ["tagged-local", "v1_tagged_backend:TaggedLocalBackend"])
def test_a_backend_from_an_installed_package_runs_the_rollouts_named_in_toml(
    tagged_site: Path, mock: MockModelServer, tmp_path: Path, backend: str
) -> None:
    config = write_env(tmp_path, backend)
    args = ("-m", "m", "-b", mock.url, "-n", "2", "-r", "1", "--state-columns", "artifacts", "--output-dir", "out")
    result = v1_eval(str(config), *args, sites=[tagged_site], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    saved = outputs(tmp_path / "out")
    assert [output["error"] for output in saved] == [None, None]
    assert [output["artifacts"] for output in saved] == [{"backend.txt": "tagged-local"}] * 2
    assert sorted(output["reward"] for output in saved) == [1.0, 1.0]  # type: ignore[type-var]
    assert sorted(request.last_user_text for request in mock.requests) == ["alpha", "beta"]
    assert list((tmp_path / "sandboxes").glob("ledger/*")) == []


def test_a_taskset_and_a_harness_from_an_installed_package_are_loaders_by_name_in_toml(
    tagged_site: Path, mock: MockModelServer, tmp_path: Path
) -> None:
    config = tmp_path / "env.toml"
    config.write_text('[env.taskset]\nloader = "tagged-words"\n[env.harness]\nloader = "tagged-harness"\n')
    args = ("-m", "m", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", "out")
    result = v1_eval(str(config), *args, sites=[tagged_site], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(output["reward"] for output in outputs(tmp_path / "out")) == [1.0, 1.0]  # type: ignore[type-var]
    rollout_calls = [request for request in mock.requests if request.path.endswith("/chat/completions")]
    assert [request.body.get("temperature") for request in rollout_calls] == [0.125] * 2


def test_a_taskset_and_a_client_type_from_an_installed_package_run_by_name(
    tagged_site: Path, mock: MockModelServer, tmp_path: Path
) -> None:
    args = ("-m", "m", "-b", mock.url, "-n", "2", "-r", "1", "--output-dir", "out", "--harness.client.client_type", "tagged-chat")
    result = v1_eval("tagged-words", *args, sites=[tagged_site], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(output["reward"] for output in outputs(tmp_path / "out")) == [1.0, 1.0]  # type: ignore[type-var]
    rollout_calls = [request for request in mock.requests if request.path.endswith("/chat/completions")]
    assert [request.headers.get("X-Plugin-Client") for request in rollout_calls] == ["tagged-chat"] * 2


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (
            "tagged-locale",
            "unknown sandbox backend 'tagged-locale' (did you mean 'tagged-local'?); "
            "known: fails-to-import, local, makes-nothing, not-a-backend, prime, tagged-local",
        ),
        (
            "fails-to-import",
            "sandbox backend 'fails-to-import' (entry point of distribution 'v1-bad-plugins'): 'v1_bad_plugins_missing:Backend' "
            "failed to import: ModuleNotFoundError: No module named 'v1_bad_plugins_missing'",
        ),
        (
            "not-a-backend",
            "sandbox backend 'not-a-backend' (entry point of distribution 'v1-bad-plugins'): 'v1_bad_plugins:NOT_A_BACKEND' "
            "is an int, not a class or factory with available, create, delete",
        ),
    ],
)
def test_a_bad_backend_name_in_toml_is_one_line_and_exit_2(
    tagged_site: Path, bad_site: Path, mock: MockModelServer, tmp_path: Path, backend: str, message: str
) -> None:
    config = write_env(tmp_path, backend)
    args = ("-m", "m", "-b", mock.url, "-n", "1", "--output-dir", "out")
    result = v1_eval(str(config), *args, sites=[tagged_site, bad_site], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert line == f"v1 eval: error: {config}: field 'env.harness.sandbox.backend': {message} (got {backend!r})"
    assert mock.requests == [] and not (tmp_path / "out").exists()


@pytest.fixture
def fresh_backends(tagged_site: Path, bad_site: Path, monkeypatch: pytest.MonkeyPatch) -> Registry[object]:
    """A sandbox-backend registry that has not read entry points yet, with both plugin packages importable."""
    monkeypatch.syspath_prepend(str(bad_site))
    monkeypatch.syspath_prepend(str(tagged_site))
    return Registry(
        SANDBOX_BACKENDS.kind, SANDBOX_BACKENDS.group, SANDBOX_BACKENDS.check, {"local": "v1.sandbox._local:LocalBackend"}
    )


def test_a_plugin_cannot_take_a_built_in_name(fresh_backends: Registry[object], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="v1.registry"):
        assert fresh_backends.get("local") is LocalBackend
        assert "tagged-local" in fresh_backends.names()
    assert fresh_backends.origin("local") == "built in"
    [warning] = [message for message in caplog.messages if "'local'" in message]
    assert warning == (
        "sandbox backend 'local' from the entry point of distribution 'v1-bad-plugins' is refused: the name is built in "
        "('v1.sandbox._local:LocalBackend'); the plugin must use another name"
    )


def test_a_plugin_factory_that_makes_no_backend_is_refused_when_used(
    fresh_backends: Registry[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("v1.sandbox._backend.SANDBOX_BACKENDS", fresh_backends)
    with pytest.raises(vf.PluginError) as caught:
        get_backend("makes-nothing")
    assert str(caught.value) == (
        "sandbox backend 'makes-nothing' (entry point of distribution 'v1-bad-plugins'): its factory returned type 'object', not a SandboxBackend"
    )
    assert isinstance(caught.value, vf.ConfigError)


def test_a_client_type_plugin_that_is_not_a_client_is_refused(tagged_site: Path, bad_site: Path, tmp_path: Path) -> None:
    result = v1_eval(
        "tagged-words",
        "-m",
        "m",
        "-b",
        "http://127.0.0.1:9/v1",
        "--harness.client.client_type",
        "not-a-client",
        sites=[tagged_site, bad_site],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result.stderr)
    assert line == (
        "v1 eval: error: taskset 'tagged-words': field 'env.harness.client.client_type': client type 'not-a-client' (entry point of "
        "distribution 'v1-bad-plugins'): 'v1_bad_plugins:NOT_A_BACKEND' is an int, not a class with get_response, stream_response, upstream_locations, close "
        "(got 'not-a-client')"
    )


def test_two_plugins_claiming_one_name_are_refused_when_it_is_used(fresh_backends: Registry[object]) -> None:
    with pytest.raises(vf.PluginError) as caught:
        fresh_backends.get("tagged-local")
    assert str(caught.value) == (
        "sandbox backend 'tagged-local' is claimed by two plugins (entry point of distribution 'v1-tagged-backend': "
        "'v1_tagged_backend:TaggedLocalBackend'; entry point of distribution 'v1-bad-plugins': 'v1_bad_plugins:ShadowLocal'); "
        "uninstall one"
    )


def test_a_plugin_found_twice_on_the_path_is_one_plugin(
    tagged_site: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same distribution installed in two folders lists each entry point twice with one value: not a clash.
    The family's built-ins, read from v1's own entry points, sit beside it."""
    again = tmp_path_factory.mktemp("tagged-site-again")
    pip_install("v1_tagged_backend", again, tmp_path_factory.mktemp("build"))
    monkeypatch.syspath_prepend(str(tagged_site))
    monkeypatch.syspath_prepend(str(again))
    assert len([found for found in distributions() if found.name == "v1-tagged-backend"]) == 2
    clients = Registry(CLIENT_TYPES.kind, CLIENT_TYPES.group, CLIENT_TYPES.check)
    assert clients.get("tagged-chat").__name__ == "TaggedChatClient"
    assert clients.origin("tagged-chat") == "entry point of distribution 'v1-tagged-backend'"
    assert clients.get("openai_responses") is vf.clients.OpenAIResponsesClient  # type: ignore[attr-defined]
    assert clients.origin("openai_responses") == "built in"
    assert clients.names()[:2] == ["openai_chat_completions", "openai_chat_completions_token"]
