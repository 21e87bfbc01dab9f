"""OpenEnvEnv end to end: a gym-contract server (stdlib) in a real bwrap sandbox per rollout, the mock model acting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.classic._openenv_env import parse_action
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, Reply

GUESS_SERVER = """
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

episode = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/reset":
            episode.update(target=int(body["seed"]) % 10, tries=0)
            self.answer(200, {"observation": {"text": "guess a digit"}, "reward": None, "done": False})
        elif self.path == "/step":
            action = body["action"]
            if not isinstance(action.get("guess"), int):
                self.answer(422, {"detail": "action needs an integer 'guess'"})
                return
            episode["tries"] += 1
            right = action["guess"] == episode["target"]
            hint = "right" if right else ("higher" if action["guess"] < episode["target"] else "lower")
            self.answer(200, {"observation": {"text": hint, "sandboxed_cwd": os.getcwd()},
                              "reward": 1.0 if right else -0.1, "done": right})
        else:
            self.answer(404, {})


HTTPServer((os.environ["HOST"], int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def make_project(root: Path, server: str = GUESS_SERVER, manifest: Any = None) -> Path:
    root.mkdir()
    (root / "server.py").write_text(server)
    manifest = manifest if manifest is not None else {"image": "example/guess:1", "start_command": "python3 server.py"}
    (root / ".build.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return root


def render(observation: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f'{observation["text"]} (answer with JSON like {{"guess": 3}})'}]


async def test_an_episode_runs_against_the_server_in_its_sandbox(mock: MockModelServer, tmp_path: Path) -> None:
    observations: list[dict[str, Any]] = []

    def recording(observation: dict[str, Any]) -> list[dict[str, Any]]:
        observations.append(observation)
        return render(observation)

    env = vf.OpenEnvEnv(
        make_project(tmp_path / "guess"), num_train_examples=1, num_eval_examples=0, seed=7, prompt_renderer=recording
    )
    mock.script(
        Reply.text("I think 3"),  # no JSON: the env asks again, the server is not called
        Reply.text('{"guess": 3}'),
        Reply.text('```json\n{"guess": 7}\n```'),
    )
    outputs = await env.generate(
        env.get_dataset(), vf.ClientConfig(api_base_url=mock.url, max_retries=0), "test-model", state_columns=["openenv_rewards"]
    )
    [output] = outputs["outputs"]
    assert output["error"] is None, output["error"]
    assert output["openenv_rewards"] == [-0.1, 1.0]
    assert output["reward"] == pytest.approx(0.9)
    assert "guess a digit" in mock.requests[0].last_user_text
    assert "held no action" in mock.requests[1].last_user_text
    assert mock.requests[2].last_user_text.startswith("higher")
    final = output["completion"][-1]
    assert final["role"] == "user" and final["content"].startswith("right")
    assert len(mock.requests) == 3 and list_sandboxes() == []
    assert observations[-1]["sandboxed_cwd"] == "/workspace/project"  # the server ran inside the sandbox


async def test_a_server_that_fails_to_start_is_a_recorded_error(mock: MockModelServer, tmp_path: Path) -> None:
    project = make_project(tmp_path / "broken", server="import sys\nsys.exit('no such module: fastapi')\n")
    env = vf.OpenEnvEnv(project, num_train_examples=1, num_eval_examples=0, prompt_renderer=render)
    outputs = await env.generate(env.get_dataset(), vf.ClientConfig(api_base_url=mock.url, max_retries=0), "test-model")
    [output] = outputs["outputs"]
    assert output["error"]["type"] == "SandboxError"
    assert "exited 1: no such module: fastapi" in output["error"]["message"]
    assert mock.requests == [] and list_sandboxes() == []


async def test_a_rejected_action_is_a_recorded_error(mock: MockModelServer, tmp_path: Path) -> None:
    env = vf.OpenEnvEnv(make_project(tmp_path / "guess"), num_train_examples=1, num_eval_examples=0, prompt_renderer=render)
    mock.script(Reply.text('{"guess": "three"}'))
    outputs = await env.generate(env.get_dataset(), vf.ClientConfig(api_base_url=mock.url, max_retries=0), "test-model")
    [output] = outputs["outputs"]
    assert "HTTP 422" in output["error"]["message"] and "integer 'guess'" in output["error"]["message"]
    assert list_sandboxes() == []


def test_parse_action() -> None:
    assert parse_action('{"a": 1}') == {"a": 1}
    assert parse_action('sure:\n```json\n{"a": [1]}\n```') == {"a": [1]}
    assert isinstance(parse_action("[1, 2]"), str)
    assert isinstance(parse_action(None), str)


def test_datasets_are_seeds(tmp_path: Path) -> None:
    env = vf.OpenEnvEnv(make_project(tmp_path / "p"), num_train_examples=3, num_eval_examples=2, seed=10, prompt_renderer=render)
    assert [row["info"]["seed"] for row in env.get_dataset()] == [10, 11, 12]
    assert [row["info"]["seed"] for row in env.get_eval_dataset()] == [13, 14]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompt_renderer": None}, "needs prompt_renderer"),
        ({"openenv_project": None}, "no openenv_project given, and no 'proj' directory beside"),
        ({"openenv_project": "/no/such/dir"}, "is not a directory"),
        ({"manifest": "{not json"}, "is not valid JSON"),
        ({"manifest": {"image": "x"}}, "needs a 'start_command' string"),
        ({"num_train_examples": -1}, "num_train_examples must be an integer"),
        ({"num_eval_examples": 10**9}, "num_eval_examples must be an integer"),
        ({"seed": "zero"}, "seed must be an integer"),
        ({"backend": "prime"}, "only backend='local' is supported"),
        ({"memory_gb": -1}, "memory_gb"),
    ],
)
def test_bad_settings_are_one_clear_error(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    manifest = change.pop("manifest", None)
    kwargs: dict[str, Any] = {"openenv_project": make_project(tmp_path / "p", manifest=manifest), "prompt_renderer": render}
    kwargs |= change
    with pytest.raises(vf.ConfigError) as caught:
        vf.OpenEnvEnv(**kwargs)
    assert message in str(caught.value)
