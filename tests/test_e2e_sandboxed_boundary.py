"""A sandboxed fn program is untrusted input: what it may write, how its input and keys reach it, what it sees.

Each test reproduces an attack (or a defect) of issues 25/26 against a real local sandbox.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "0.1.0"

[tool.setuptools]
py-modules = ["{module}"]
"""

PROGRAMS = """
import json
import os
import socket

FORGED = {
    "example_id": 99, "trajectory_id": "forged", "prompt": "forged", "completion": "forged", "model": "forged",
}


def forge(task, state):
    refused = []
    for key, value in FORGED.items():
        try:
            state[key] = value
        except RuntimeError as exc:
            refused.append(key if "set by the framework" in str(exc) else str(exc))
    state["refused"] = refused


def forge_by_return(task, state):
    return {"completion": "forged", "mine": 1}


def returns_state(task, state):
    state["seen"] = 1
    return state


def returns_none(task, state):
    state["seen"] = 1


def returns_mapping(task, state):
    state["seen"] = 1
    return {"extra": 2}


def big_prompt(task, state):
    state["prompt_chars"] = len(task["prompt"][0]["content"])


def neighbours(task, state):
    state["run_dir"] = sorted(os.listdir("/run/v1"))
    reached = []
    for name in state["run_dir"]:
        path = "/run/v1/" + name
        if path == os.environ["V1_CONTROL_SOCKET"] or not name.startswith("control"):
            continue
        with socket.socket(socket.AF_UNIX) as sock:
            try:
                sock.connect(path)
                sock.sendall(json.dumps({"op": "set", "key": "hijacked", "value": True}).encode() + b"\\n")
                reached.append(sock.recv(100).decode())
            except OSError as exc:
                reached.append(type(exc).__name__)
    state["reached"] = reached
"""


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


@pytest.fixture
def programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A single-file project holding the attack programs; returns its module name."""
    root = tmp_path / "boundary_project"
    root.mkdir()
    (root / "boundary_programs.py").write_text(PROGRAMS)
    (root / "pyproject.toml").write_text(PYPROJECT.format(name="boundary-programs", module="boundary_programs"))
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    return "boundary_programs"


def harness(mock: MockModelServer, fn: str, **kwargs: Any) -> vf.Harness:
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    return vf.Harness(client=client, model="test-model", program={"fn": fn, "sandbox": True}, **kwargs)


async def test_the_state_proxy_refuses_the_rollouts_identity(mock: MockModelServer, programs: str) -> None:
    state = vf.State.for_task(vf.Task({"prompt": "hi", "example_id": 3}))
    trajectory_id = state["trajectory_id"]
    state = await harness(mock, f"{programs}:forge").run(vf.Task({"prompt": "hi", "example_id": 3}), state)
    assert state["error"] is None, state["error"]
    assert state["refused"] == ["example_id", "trajectory_id", "prompt", "completion", "model"]
    assert state["example_id"] == 3 and state["trajectory_id"] == trajectory_id
    assert "forged" not in str(state.get("prompt")) and state["completion"] != "forged"


async def test_a_returned_mapping_cannot_forge_the_completion(mock: MockModelServer, programs: str) -> None:
    state = await harness(mock, f"{programs}:forge_by_return").run({"prompt": "hi"})
    assert state["error"] is not None and state["error"]["type"] == "StateFieldError"
    assert state["completion"] != "forged"


@pytest.mark.parametrize("returned", ["returns_state", "returns_none", "returns_mapping"])
@pytest.mark.parametrize("where", ["sandbox", "in_process"])
async def test_what_a_program_returns_means_the_same_in_and_out_of_the_sandbox(
    mock: MockModelServer, programs: str, returned: str, where: str
) -> None:
    ref = f"{programs}:{returned}"
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    program: dict[str, Any] = {"fn": ref, "sandbox": True} if where == "sandbox" else {"fn": ref}
    state = await vf.Harness(client=client, model="test-model", program=program).run({"prompt": "hi"})
    assert state["error"] is None, state["error"]
    assert state["seen"] == 1
    assert state.get("extra") == (2 if returned == "returns_mapping" else None)


async def test_a_large_task_reaches_the_program_outside_argv(mock: MockModelServer, programs: str) -> None:
    prompt = "x" * 200_000  # one argv string may hold at most 128 KiB
    state = await harness(mock, f"{programs}:big_prompt").run({"prompt": prompt})
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["prompt_chars"] == 200_000


async def test_the_seeds_package_layout_imports_in_the_sandbox(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "layout_root" / "seed_layout_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "agent.py").write_text("def run(task, state):\n    state['imported'] = __name__\n")
    (package / "pyproject.toml").write_text("[project]\nname = 'seed-layout-pkg'\nversion = '0.1.0'\n")
    monkeypatch.syspath_prepend(str(package.parent))
    importlib.invalidate_caches()
    state = await harness(mock, "seed_layout_pkg.agent:run").run({"prompt": "hi"})
    assert state["error"] is None, (state["error"], state.get("program_result"))
    assert state["imported"] == "seed_layout_pkg.agent"


async def test_a_rollout_sees_only_its_own_control_socket(mock: MockModelServer, programs: str) -> None:
    h = harness(mock, f"{programs}:neighbours", sandbox={"scope": "group"})
    tasks, states = [vf.Task({"prompt": "hi"}).freeze()] * 3, [vf.State() for _ in range(3)]
    for state, task in zip(states, tasks, strict=True):
        state.task = task
    states = await h.run_group(tasks, states)
    for state in states:
        assert state["error"] is None, state["error"]
        assert state["reached"] == [] and "hijacked" not in state
        assert len([name for name in state["run_dir"] if name.startswith("control")]) == 1


SHARED_SANDBOX_AGENT = """
import json, os, time, urllib.error, urllib.request

def call(url, key):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(url + "/chat/completions", body, {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=HANG_S) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code

if os.environ["ROLE"] == "follower":
    json.dump({"url": os.environ["OPENAI_BASE_URL"], "key": os.environ["OPENAI_API_KEY"]}, open("leak.json.tmp", "w"))
    os.rename("leak.json.tmp", "leak.json")
else:
    while not os.path.exists("leak.json"):
        time.sleep(0.05)
    leak = json.load(open("leak.json"))
    statuses, deadline = [], time.monotonic() + HANG_S  # the follower's phase ends when it ends: no count of tries
    while time.monotonic() < deadline and (not statuses or statuses[-1] != 401):
        statuses.append(call(leak["url"], leak["key"]))
        time.sleep(0.02)
    open("statuses.json", "w").write(json.dumps(statuses))
"""


async def test_a_leaked_key_dies_with_its_rollouts_program_phase(mock: MockModelServer) -> None:
    """B5: a follower leaks its key into the shared workspace; the leader's calls with it after the
    follower's program phase are refused, so every upstream call is a recorded turn."""
    program = {
        "command": ["python", "agent.py"],
        "files": {"agent.py": f"HANG_S = {HANG_S}\n{SHARED_SANDBOX_AGENT}"},
        "bindings": {"env.ROLE": "task.role"},
        "artifacts": [{"path": "statuses.json", "format": "json", "optional": True}],
    }
    h = vf.Harness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="test-model",
        max_turns=2,
        program=program,
        sandbox={"scope": "group"},
    )
    tasks = [vf.Task({"prompt": "hi", "role": role}).freeze() for role in ("leader", "follower")]
    leader, follower = await h.run_group(tasks)
    assert follower["error"] is None, follower["error"]
    statuses = leader["artifacts"]["statuses.json"]
    assert statuses[-1] == 401, statuses
    recorded = len(leader["trajectory"]) + len(follower["trajectory"])
    assert len(mock.requests) == recorded, (statuses, recorded)
    assert len(follower["trajectory"]) <= 2


def processes_showing(text: str) -> list[str]:
    """The host processes whose command line holds `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(str(cmdline))
        except OSError:
            continue
    return found


async def test_rollout_keys_never_reach_the_hosts_process_list(tmp_path: Path) -> None:
    """B7: bubblewrap's argv carried `--setenv OPENAI_API_KEY v1-...`, readable by any host process."""
    from v1.sandbox import get_manager

    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig())
    key = "v1-never-in-argv-" + tmp_path.name
    try:
        running = asyncio.create_task(
            sandbox.exec(["sh", "-c", 'echo "$OPENAI_API_KEY" > seen.txt; sleep 3'], env={"OPENAI_API_KEY": key})
        )
        while not running.done():
            assert await asyncio.to_thread(processes_showing, key) == []
            if await asyncio.to_thread((sandbox.workspace / "seen.txt").exists):
                break
            await asyncio.sleep(0.05)
        result = await running
        assert result.exit_code == 0, result.stderr
        assert (await sandbox.read_file("seen.txt", 100)).decode().strip() == key
    finally:
        await manager.delete(sandbox)


async def test_an_environment_value_cannot_inject_bubblewrap_options(mock: MockModelServer, tmp_path: Path) -> None:
    """The environment reaches bwrap NUL-separated: a NUL in a task-bound value would start a new option."""
    secret = tmp_path / "host-only"
    secret.mkdir()
    (secret / "secret.txt").write_text("HOST-SECRET")
    program = {
        "command": ["sh", "-c", "cat /injected/secret.txt || echo not-mounted"],
        "bindings": {"env.NOTE": "task.note"},
    }
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    h = vf.Harness(client=client, model="m", program=program, sandbox={})
    state = await h.run({"prompt": "hi", "note": f"x\u0000--ro-bind\u0000{secret}\u0000/injected"})
    assert state["error"] is not None and "NUL" in state["error"]["message"], state["error"]
    assert "HOST-SECRET" not in json.dumps(state.get("program_result"))
