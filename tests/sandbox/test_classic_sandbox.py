"""The classic sandbox fields mapped onto SandboxConfig, shell commands and the persistent REPL, in real bwrap sandboxes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S, growing_limits
from v1.classic._sandbox_fields import SEED_IMAGE, run_shell, seed_sandbox_config
from v1.sandbox import PythonRepl, Sandbox, get_manager
from v1.sandbox._prime import PrimeSandbox, create_request_fields


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def sandbox_for(**fields: object) -> Sandbox:
    return await get_manager().create(seed_sandbox_config(**fields))  # type: ignore[arg-type]


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    created = await sandbox_for(timeout_per_command_seconds=10)
    yield created
    await get_manager().delete(created)


def test_every_seed_field_maps_onto_the_config() -> None:
    config = seed_sandbox_config(
        sandbox_name="mine",
        cpu_cores=2,
        memory_gb=3,
        disk_size_gb=7,
        timeout_minutes=9,
        timeout_per_command_seconds=11,
        environment_vars={"A": "1"},
        labels=["x"],
    )
    assert (config.backend, config.image, config.start_command) == ("local", None, None)
    assert (config.cpu_cores, config.memory_gb, config.disk_size_gb, config.gpu_count) == (2, 3, 7, 0)
    assert (config.timeout_minutes, config.command_timeout, config.env) == (9, 11, {"A": "1"})
    assert config.labels == ["name:mine", "x"]

    remote = seed_sandbox_config(
        backend="prime", docker_image="ubuntu:24.04", gpu_count=1, team_id="team-1", advanced_configs={"x": 1}
    )
    fields = create_request_fields(remote, "v1-abc", remote.labels)
    assert fields["docker_image"] == "ubuntu:24.04"
    assert fields["start_command"] == {"executable": "tail", "args": ["-f", "/dev/null"]}
    assert (fields["gpu_count"], fields["team_id"], fields["advanced_configs"]) == (1, "team-1", {"x": 1})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"docker_image": "ubuntu:24.04"}, "docker_image='ubuntu:24.04' needs a container backend"),
        ({"start_command": "sleep infinity"}, "start_command='sleep infinity' needs a container backend"),
        ({"gpu_count": 1}, "gpu_count=1: the local sandbox backend has no GPUs"),
        ({"team_id": "t"}, "team_id applies to prime sandboxes only"),
        ({"advanced_configs": {}}, "advanced_configs applies to prime sandboxes only"),
        ({"memory_gb": 0}, "field 'memory_gb': Input should be greater than 0"),
        ({"cpu_cores": -1}, "field 'cpu_cores': Input should be greater than 0"),
        ({"disk_size_gb": "lots"}, "field 'disk_size_gb': Input should be a valid number"),
        ({"timeout_per_command_seconds": 0}, "field 'timeout_per_command_seconds': Input should be greater than 0"),
        ({"timeout_minutes": 10**9}, "timeout_minutes must be at most 10080"),
        ({"environment_vars": {"A": 1}}, "field 'environment_vars.A': Input should be a valid string"),
        ({"backend": "prime", "gpu_count": -1}, "field 'gpu_count': Input should be greater than or equal to 0"),
    ],
)
def test_bad_fields_are_one_clear_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(vf.ConfigError) as caught:
        seed_sandbox_config(**fields)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_seed_default_image_stands_for_the_host_system() -> None:
    assert seed_sandbox_config(docker_image=SEED_IMAGE).image is None
    assert seed_sandbox_config(backend="prime").image == SEED_IMAGE


async def test_shell_output_environment_and_exit_status() -> None:
    sandbox = await sandbox_for(environment_vars={"GREETING": "hello"})
    try:
        assert await run_shell(sandbox, "echo $GREETING; pwd", timeout=HANG_S) == "hello\n/workspace"
        answer = await run_shell(sandbox, "echo out; echo err >&2; exit 3", timeout=HANG_S)
        assert answer == "out\nstderr:\nerr\n[exit status 3]"
        await run_shell(sandbox, "mkdir sub && echo x > sub/f", timeout=HANG_S)
        assert await run_shell(sandbox, "ls", timeout=HANG_S, working_dir="/workspace/sub") == "f"
    finally:
        await get_manager().delete(sandbox)


async def test_a_command_past_its_timeout_is_killed(sandbox: Sandbox) -> None:
    for timeout in growing_limits():  # the limit counts the sandbox's start: on a loaded machine, echo may not run in 1 s
        answer = await run_shell(sandbox, "echo started; sleep 3600", timeout=timeout)
        if answer != f"[timed out after {timeout:g} s; the command was killed]":
            break
    assert answer == f"started\n[timed out after {timeout:g} s; the command was killed]"
    assert await run_shell(sandbox, "echo still usable", timeout=HANG_S) == "still usable"


async def test_memory_gb_is_applied() -> None:
    sandbox = await sandbox_for(memory_gb=0.125)
    try:
        hog = "python3 -c 'x = bytearray(400 * 1024 * 1024); x[::4096] = b\"y\" * len(x[::4096]); print(len(x))'"
        answer = await run_shell(sandbox, hog, timeout=HANG_S)
        assert "killed at the sandbox's memory_gb limit" in answer
        assert "419430400" not in answer
        assert await run_shell(sandbox, "python3 -c 'print(len(bytearray(10 * 1024 * 1024)))'", timeout=HANG_S) == "10485760"
    finally:
        await get_manager().delete(sandbox)


async def test_disk_size_gb_is_applied() -> None:
    sandbox = await sandbox_for(disk_size_gb=0.01)
    try:
        answer = await run_shell(sandbox, "head -c 30000000 /dev/zero > big; echo wrote", timeout=HANG_S)
        assert "killed at the sandbox's disk_size_gb limit" in answer
    finally:
        await get_manager().delete(sandbox)


async def test_repl_keeps_its_namespace_between_cells(sandbox: Sandbox) -> None:
    repl = PythonRepl(sandbox)
    try:
        assert await repl.run("import math\nradius = 2", timeout=HANG_S) == ""
        assert await repl.run("def area(r):\n    return math.pi * r * r", timeout=HANG_S) == ""
        assert await repl.run("print('area'); round(area(radius), 3)", timeout=HANG_S) == "area\n12.566\n"
        assert "ZeroDivisionError: division by zero" in await repl.run("1 / 0", timeout=HANG_S)
        assert "SyntaxError" in await repl.run("def broken(:", timeout=HANG_S)
        assert "SystemExit: 3" in await repl.run("raise SystemExit(3)", timeout=HANG_S)
        assert await repl.run("radius", timeout=HANG_S) == "2\n"
        assert await repl.run("import os; os.getcwd()", timeout=HANG_S) == "'/workspace'\n"
        assert repl.starts == 1
    finally:
        await repl.close()


async def test_a_cell_past_its_timeout_restarts_the_interpreter(sandbox: Sandbox) -> None:
    repl = PythonRepl(sandbox)
    try:
        await repl.run("kept = 1", timeout=HANG_S)
        assert await repl.run("while True: pass", timeout=1) == "[timed out after 1 s; the interpreter was stopped]"
        answer = await repl.run("kept", timeout=HANG_S)
        assert answer.startswith("[the interpreter was restarted: earlier variables are gone]\n")
        assert "NameError" in answer
        assert await repl.run("kept = 2; kept", timeout=HANG_S) == "2\n"
        assert repl.starts == 2
    finally:
        await repl.close()


async def test_an_interpreter_that_dies_is_one_clear_error_then_restarts(sandbox: Sandbox) -> None:
    repl = PythonRepl(sandbox)
    try:
        with pytest.raises(vf.SandboxError, match=r"the Python interpreter in sandbox .* exited"):
            await repl.run("import os; os._exit(7)", timeout=HANG_S)
        assert (await repl.run("6 * 7", timeout=HANG_S)).endswith("42\n")
    finally:
        await repl.close()


async def test_a_missing_interpreter_or_control_channel_is_one_clear_error(sandbox: Sandbox) -> None:
    with pytest.raises(vf.SandboxError, match="did not start"):
        await PythonRepl(sandbox, python="no-such-python").run("1", timeout=HANG_S)
    remote = PrimeSandbox(None, "remote-1", vf.SandboxConfig(backend="prime"), None)
    with pytest.raises(vf.SandboxError, match="has no control channel for a persistent Python interpreter"):
        await PythonRepl(remote).run("1", timeout=HANG_S)


async def test_repl_shows_what_subprocesses_write(sandbox: Sandbox) -> None:
    repl = PythonRepl(sandbox)
    try:
        code = "import subprocess, sys\nprint('before')\nsubprocess.run(['sh', '-c', 'echo from-shell; echo oops >&2'])\nprint('after')"
        assert await repl.run(code, timeout=HANG_S) == "before\nfrom-shell\noops\nafter\n"
        assert await repl.run("print('x' * 2_000_000)", timeout=HANG_S) == "[... 1000001 bytes cut ...]\n" + "x" * 999_999 + "\n"
        assert (await repl.run("input()", timeout=HANG_S)).endswith("EOFError: EOF when reading a line\n")
    finally:
        await repl.close()
