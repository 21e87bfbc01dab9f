"""Sandboxed program forms built from TOML environments, run against the mock model."""

from __future__ import annotations

from pathlib import Path

import pytest

import v1 as vf
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, MockRequest, Reply

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


async def test_command_agent_toml_runs_sandboxed_and_scores(mock: MockModelServer) -> None:
    mock.responder = reverser
    client = {"api_base_url": mock.url, "max_retries": 0}
    env = vf.load_environment(str(ROOT / "configs" / "command_agent.toml"), harness={"client": client, "model": "m"})
    assert env.harness.config.sandbox == vf.SandboxConfig(memory_gb=1, disk_size_gb=1, timeout_minutes=10)
    results = await env.evaluate(num_examples=2, rollouts_per_example=2, max_concurrent=4, state_columns=["artifacts"])
    assert len(results["outputs"]) == 4
    for output in results["outputs"]:
        assert output["error"] is None, output["error"]
        assert output["reward"] == 1.0
        [step] = output["trajectory"]
        assert step["prompt"][0]["role"] == "system"
        assert output["artifacts"]["answer.txt"] == step["completion"][0]["content"]
    assert list_sandboxes() == []


SANDBOXED_TOOLS_TOML = """
[env.taskset]
source = "{module}:rows"

[env.harness]
max_turns = 3

[env.harness.program]
base = true
files = {{ "notes.txt" = "from the harness" }}

[env.harness.sandbox]
scope = "group"

[[env.harness.toolsets]]
tools = ["{module}:bash"]
sandbox = "program"
"""

MODULE = '''
async def bash(command: str, sandbox) -> str:
    """Run a shell command."""
    result = await sandbox.exec(["sh", "-c", command])
    return result.stdout


def rows():
    return [
        {"prompt": "default workdir"},
        {"prompt": "task files", "sandbox": {"memory_gb": 0.5}, "program": {"files": {"notes.txt": "from the task"}}},
    ]
'''


async def test_base_loop_with_sandboxed_toolset_and_task_overrides_from_toml(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sandboxed_tools_env.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "env.toml"
    path.write_text(SANDBOXED_TOOLS_TOML.format(module="sandboxed_tools_env"))

    def policy(request: MockRequest) -> Reply:
        if request.last_message["role"] == "tool":
            return Reply.text(request.last_message["content"])
        return Reply.tool("bash", {"command": "pwd; cat notes.txt"})

    mock.responder = policy
    env = vf.load_environment(str(path), harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m"})
    results = await env.evaluate(num_examples=2, rollouts_per_example=2)
    plain = [output for output in results["outputs"] if output["error"] is None]
    refused = [output["error"]["message"] for output in results["outputs"] if output["error"] is not None]
    assert [output["completion"][-1]["content"] for output in plain] == ["/workspace\nfrom the harness"] * 2
    assert len(refused) == 2 and all("task field 'program.files'" in message for message in refused)  # a group sandbox
    assert list_sandboxes() == []


FORMS_TOML = """
[env.taskset]
source = "{module}:rows"

[env.harness.program]
{program}
"""

FN_MODULE = """
def rows():
    return [{"prompt": "one"}, {"prompt": "two"}]


async def run(task, state):
    reply = await state.get_client().chat.completions.create(model=state.get_model(), messages=task["prompt"])
    state["answer_seen"] = reply.choices[0].message.content
"""

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "toml-fn-env"
version = "0.1.0"

[tool.setuptools]
py-modules = ["toml_fn_env"]
"""


LOCAL_COMMAND = """command = ["sh", "-c", '''curl -sS "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" -d @body.json''']
files = { "body.json" = '{"model": "x", "messages": [{"role": "user", "content": "from a local command"}]}' }"""


@pytest.mark.parametrize(
    "program",
    [LOCAL_COMMAND, 'fn = "toml_fn_env:run"\nsandbox = { scope = "group" }'],
    ids=["local-command", "sandboxed-fn"],
)
async def test_more_program_forms_from_toml(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: str
) -> None:
    (tmp_path / "toml_fn_env.py").write_text(FN_MODULE)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "env.toml"
    path.write_text(FORMS_TOML.format(module="toml_fn_env", program=program))
    env = vf.load_environment(str(path), harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m"})
    results = await env.evaluate(num_examples=2, rollouts_per_example=1, state_columns=["answer_seen"])
    assert [output["error"] for output in results["outputs"]] == [None, None]
    assert all(len(output["trajectory"]) == 1 for output in results["outputs"])
    if "fn" in program:
        assert sorted(output["answer_seen"] for output in results["outputs"]) == ["one", "two"]
    else:
        assert [o["completion"][0]["content"] for o in results["outputs"]] == ["from a local command"] * 2
    assert list_sandboxes() == []
