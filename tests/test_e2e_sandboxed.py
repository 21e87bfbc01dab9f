"""Sandboxed fn programs, sandboxed toolsets and users, and borrowed sandboxes, end to end."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.programs._sandboxed import find_package
from v1.sandbox import list_sandboxes
from v1.testing import MockModelServer, Reply

AGENT_MODULE = """
import os

import iniconfig


async def run(task, state):
    client = state.get_client()
    answer = await client.chat.completions.create(
        model=state.get_model(), messages=[{"role": "user", "content": task["prompt"][0]["content"]}]
    )
    state["answer"] = answer.choices[0].message.content
    state["sum"] = await state.get_tools()["add"](a=2, b=3)
    try:
        state["is_completed"] = True
    except RuntimeError as exc:
        state["write_refused"] = str(exc)
    return {"dependency_file": iniconfig.__file__, "cwd": os.getcwd()}
"""

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"
dependencies = ["iniconfig"]

[tool.setuptools]
py-modules = ["{module}"]
"""


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def harness(mock: MockModelServer, **kwargs: Any) -> vf.Harness:
    return vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="test-model", **kwargs)


def make_project(root: Path, module: str, source: str) -> Path:
    root.mkdir()
    (root / f"{module}.py").write_text(source)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=module.replace("_", "-"), module=module))
    return root


async def test_sandboxed_fn_installs_its_package_and_reaches_the_host_rollout(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path / "agent_project", "sandboxed_agent_mod", AGENT_MODULE)
    monkeypatch.syspath_prepend(str(project))
    importlib.invalidate_caches()
    mock.responder = lambda request: Reply.text(request.last_user_text.upper())
    h = harness(mock, program={"fn": "sandboxed_agent_mod:run", "sandbox": True}, toolsets=[vf.Toolset([add])])
    state = await h.run({"prompt": "shout this"})
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["answer"] == "SHOUT THIS" and state["sum"] == 5
    assert "is managed by the framework" in state["write_refused"]
    assert state["dependency_file"].startswith("/workspace/.v1/python/iniconfig")
    assert state["cwd"] == "/workspace"
    [step] = state["trajectory"]
    assert step["completion"] == [{"role": "assistant", "content": "SHOUT THIS"}]
    assert mock.requests[0].body["model"] == "test-model"
    assert list_sandboxes() == []


def test_package_discovery_follows_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    single = make_project(tmp_path / "single", "single_file_agent", "def run(task, state): pass\n")
    package = tmp_path / "pkgroot" / "package_agent"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text("def run(task, state): pass\n")
    (package / "pyproject.toml").write_text("[project]\nname = 'package-agent'\nversion = '0'\n")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "bare_agent.py").write_text("def run(task, state): pass\n")
    for path in (single, package.parent, bare):
        monkeypatch.syspath_prepend(str(path))
    importlib.invalidate_caches()
    assert find_package("single_file_agent:run") == single.resolve()
    assert find_package("package_agent.main:run") == package.resolve()
    with pytest.raises(vf.ConfigError, match=r"needs its package's pyproject.toml beside the module file .*bare_agent.py"):
        find_package("bare_agent:run")
    with pytest.raises(vf.ConfigError, match="is not importable here"):
        harness(MockModelServer(), program={"fn": "no_such_agent_xyz:run", "sandbox": True})


async def bash(command: str, sandbox: Any) -> str:
    """Run a shell command in the sandbox."""
    result = await sandbox.exec(["sh", "-c", command], timeout=HANG_S)
    return result.stdout + result.stderr


async def test_base_loop_tools_and_user_run_in_the_program_sandbox(mock: MockModelServer) -> None:
    mock.script(
        Reply.tool("bash", {"command": 'cat marker.txt; echo "key=[$OPENAI_API_KEY]"; echo tool > by-tool.txt'}),
        Reply.text("first answer"),
        Reply.text("second answer"),
    )

    async def user(messages: list[dict[str, Any]], state: vf.State, sandbox: Any) -> str | None:
        if len(messages) > 6:
            return None
        return (await sandbox.read_file("by-tool.txt", 100)).decode().strip() + " seen by user"

    program = {"base": True, "files": {"marker.txt": "from-program"}, "artifacts": ["by-tool.txt"]}
    h = harness(
        mock,
        program=program,
        sandbox={},
        toolsets=[vf.Toolset([bash], sandbox="program")],
        user=vf.User(user, sandbox="program"),
    )
    state = await h.run({"prompt": "go"})
    assert state["error"] is None, state["error"]
    tool_message = state["trajectory"][1]["prompt"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"] == "from-programkey=[]\n"
    assert state["trajectory"][2]["prompt"][-1] == {"role": "user", "content": "tool seen by user"}
    assert state["artifacts"] == {"by-tool.txt": "tool\n"}
    [tool] = mock.requests[0].body["tools"]
    assert tool["function"]["name"] == "bash" and list(tool["function"]["parameters"]["properties"]) == ["command"]
    assert list_sandboxes() == []


async def test_child_rollout_borrows_the_parent_sandbox(mock: MockModelServer) -> None:
    child = harness(mock, program={"command": ["sh", "-c", "cat shared.txt > seen.txt"], "artifacts": ["seen.txt"]})

    async def parent(task: vf.Task, state: vf.State) -> None:
        sandbox = await state.get_sandbox()
        await sandbox.write_file("shared.txt", b"written by the parent")
        child_state = state.for_task({"prompt": "child"}, borrow=["model", "sandbox"])
        state["child"] = dict(await child.run({"prompt": "child"}, child_state))

    state = await harness(mock, program=parent, sandbox={}).run({"prompt": "parent"})
    assert state["error"] is None and state["child"]["error"] is None, state["child"]
    assert state["child"]["artifacts"] == {"seen.txt": "written by the parent"}
    assert list_sandboxes() == []


async def test_sandbox_settings_are_checked(mock: MockModelServer) -> None:
    with pytest.raises(vf.ConfigError, match="expected 'program', a SandboxConfig"):
        vf.User(lambda messages: None, sandbox=3)
    state = await harness(mock, toolsets=[vf.Toolset([bash], sandbox="program")]).run("x")
    assert state["error"] is None
    mock.script(Reply.tool("bash", {"command": "true"}), Reply.text("done"))
    state = await harness(mock, toolsets=[vf.Toolset([bash], sandbox="program")]).run("x")
    assert "this rollout's program has no sandbox" in state["trajectory"][1]["prompt"][-1]["content"]
