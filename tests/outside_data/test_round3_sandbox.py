"""Round 3 of outside data against the sandbox: bwrap's option file, task folders, shared-scope files.

Each attack is sent as an attacker would: the model's tool call through a real `SandboxEnv` rollout
against the mock server, a task row through `Harness.run`, a downloaded task folder through the swe
and harbor tasksets, all with real bubblewrap sandboxes (as root where the host side is root).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.classic import SandboxEnv
from v1.sandbox import get_manager
from v1.testing import MockModelServer, Reply

ROWS = [{"question": "work in the sandbox", "answer": "hi"}]
INJECTED_BIND = "\u0000--bind\u0000/\u0000/tmp/host"
"""What follows a path to bind the host's `/` read-write at `/tmp/host` once the path ends at a NUL."""


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


@pytest.fixture
def host_drop() -> Iterator[Path]:
    """A host folder that the sandbox user could write to, were the host's `/` bound inside."""
    folder = Path(tempfile.mkdtemp(prefix="v1-round3-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tool_answers(output: dict[str, Any]) -> list[str]:
    return [str(message["content"]) for message in output["completion"] if message["role"] == "tool"]


async def test_a_model_working_dir_holding_nul_binds_nothing_of_the_host(mock: MockModelServer, host_drop: Path) -> None:
    env = SandboxEnv(dataset=ROWS, max_turns=4)
    escape = f"ls /tmp/host; echo pwned > /tmp/host{host_drop}/pwned"
    mock.script(
        Reply.tool("bash", {"command": escape, "working_dir": "/workspace" + INJECTED_BIND}),
        Reply.tool("bash", {"command": "pwd", "working_dir": "../../etc"}),
        Reply.tool("bash", {"command": "pwd; touch here", "working_dir": "sub/.."}),
        Reply.text("done"),
    )
    outputs = await env.generate(ROWS, vf.ClientConfig(api_base_url=mock.url, max_retries=0), "m")
    (output,) = outputs["outputs"]
    assert not (host_drop / "pwned").exists()
    injected, outside, inside = tool_answers(output)
    assert "work" not in injected.split() and "usr" not in injected.split()  # the host's / was never listed
    assert "control character" in injected and "working_dir" in injected
    assert "outside the sandbox's workspace" in outside
    assert inside == "/workspace"
    assert output["error"] is None


def command_harness(mock: MockModelServer, command: str, **kwargs: Any) -> vf.Harness:
    return vf.Harness(
        program={"command": ["sh", "-c", command], **kwargs.pop("program", {})},
        sandbox={"memory_gb": 1, "disk_size_gb": 1, **kwargs.pop("sandbox", {})},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        **kwargs,
    )


async def test_a_row_may_not_choose_the_sandbox_workdir_in_any_spelling(mock: MockModelServer, host_drop: Path) -> None:
    harness = command_harness(mock, f"ls /tmp/host; echo pwned > /tmp/host{host_drop}/pwned")
    rows: list[dict[str, Any]] = [
        {"prompt": "a", "sandbox": {"workdir": "/workspace" + INJECTED_BIND}},
        {"prompt": "b", "sandbox": {"workdir": "/job"}},
        {"prompt": "c", "sandbox": {"workdir": 7}},
        {"prompt": "d", "sandbox": {"workdir": "/workspace", "memory_gb": 0.5}},  # the harness's own: no change
    ]
    injected, other, malformed, same = await harness.run_group(rows)
    assert not (host_drop / "pwned").exists()
    for state in (injected, other, malformed):
        assert state["error"]["where"] == "task", state["error"]
        assert "task field 'sandbox.workdir'" in state["error"]["message"]
        assert "\n" not in state["error"]["message"]
    assert same["error"]["where"] == "program" and "/tmp/host" in same["error"]["message"]  # ran, saw no /tmp/host


@pytest.mark.parametrize(
    "config",
    [
        {"workdir": "/workspace" + INJECTED_BIND},
        {"workdir": "/workspace/../etc"},
        {"workdir": "/workspace/"},
        {"workdir": "/"},
        {"mounts": {"/data" + INJECTED_BIND: "/usr/share"}},
        {"mounts": {"/data": "/usr/share" + INJECTED_BIND}},
        {"mounts": {"/data": "/usr/share/../../etc"}},
        {"env": {"A\u0000--bind\u0000/\u0000/tmp/host": "x"}},
        {"env": {"A": "x\u0000--share-net"}},
        {"env": {"A=B": "x"}},
    ],
)
def test_a_sandbox_config_with_a_path_or_variable_that_could_end_an_option_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(vf.ConfigError, match=r"workdir|mounts|env"):
        vf.SandboxConfig(**config)


async def test_exec_refuses_a_nul_in_its_working_directory_and_environment(host_drop: Path) -> None:
    manager = get_manager()
    sandbox = await manager.create(vf.SandboxConfig(memory_gb=1, disk_size_gb=1))
    try:
        escape = ["sh", "-c", f"echo pwned > /tmp/host{host_drop}/pwned"]
        attempts: list[dict[str, Any]] = [
            {"cwd": "/workspace" + INJECTED_BIND},
            {"cwd": "sub" + INJECTED_BIND},
            {"cwd": "/workspace/../tmp"},
            {"env": {"X\u0000--bind\u0000/\u0000/tmp/host\u0000--setenv\u0000Y": "1"}},
            {"env": {"X\nY": "1"}},
            {"env": {"X": "1\u0000--bind\u0000/\u0000/tmp/host"}},
        ]
        for attempt in attempts:
            with pytest.raises(vf.SandboxError, match=r"control character|NUL|normalised"):
                await sandbox.exec(escape, **attempt)
        await sandbox.write_file("sub/keep", b"")
        plain = await sandbox.exec(["sh", "-c", 'pwd; printf "%s" "$NOTE"'], cwd="sub", env={"NOTE": "a\nb"})
        assert plain.stdout == "/workspace/sub\na\nb"  # a value is data: a newline in it is kept
        assert not (host_drop / "pwned").exists()
    finally:
        await manager.delete(sandbox)


async def test_an_artifact_path_holding_nul_is_a_clean_refusal(mock: MockModelServer) -> None:
    harness = command_harness(mock, "echo hi > out.txt")
    state = await harness.run({"prompt": "a", "program": {"artifacts": ["out.txt\u0000--bind\u0000/\u0000/tmp/host"]}})
    assert state["error"] is not None and "\n" not in state["error"]["message"]
    assert "artifacts" in state["error"]["message"]
