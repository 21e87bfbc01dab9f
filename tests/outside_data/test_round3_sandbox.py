"""Round 3 of outside data against the sandbox: bwrap's option file, task folders, shared-scope files.

Each attack is sent as an attacker would: the model's tool call through a real `SandboxEnv` rollout
against the mock server, a task row through `Harness.run`, a downloaded task folder through the swe
and harbor tasksets, all with real bubblewrap sandboxes (as root where the host side is root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tasksets import harbor, swe
from tests.tools.patience import HANG_S
from v1.classic import SandboxEnv
from v1.sandbox import get_manager
from v1.testing import MockModelServer, Reply

ROOT = Path(__file__).resolve().parents[2]
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


SECRET = "SECRET-KEY-MATERIAL-7f3a"
ATTACK_TOML = """
[env]
name = "task-folders"
[env.taskset]
taskset_id = "swe"
source = "attack_rows:rows"
setups = [{ fn = "tasksets.swe:make_repo" }]
rewards = [{ fn = "tasksets.swe:tests_pass", weight = 1.0 }]
[env.harness]
max_turns = 1
timeout_seconds = 120
[env.harness.program]
command = ["sh", "-c", "cat * */* */*/* 2>&1; ls -laR"]
[env.harness.sandbox]
memory_gb = 1
disk_size_gb = 1
"""
ATTACK_ROWS = """
from tasksets.swe import load_rows

def rows():
    return load_rows({tasks!r})
"""


@pytest.fixture
def secret_home(tmp_path: Path) -> Path:
    """A user's ~/.ssh: a folder only its owner enters, holding a key only its owner reads."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text(SECRET + "\n")
    (ssh / "id_rsa").chmod(0o600)
    ssh.chmod(0o700)
    return ssh


def swe_task(tasks: Path, name: str, test_command: str = "cat * */* 2>&1; false") -> Path:
    folder = tasks / name
    shutil.copytree(ROOT / "tasksets" / "data" / "swe" / "calc-add", folder)
    (folder / "task.toml").write_text(f"test_command = {test_command!r}\n")
    return folder


def relink(path: Path, target: Path) -> None:
    shutil.rmtree(path)
    path.symlink_to(target, target_is_directory=True)


def test_a_downloaded_swe_task_folder_linking_to_a_host_folder_copies_none_of_it(
    tmp_path: Path, mock: MockModelServer, secret_home: Path
) -> None:
    tasks = tmp_path / "tasks"
    relink(swe_task(tasks, "a-repo-link") / "repo", secret_home)
    relink(swe_task(tasks, "b-tests-link") / "tests", secret_home)
    (swe_task(tasks, "c-inner-link") / "repo" / "keys").symlink_to(secret_home, target_is_directory=True)
    (swe_task(tasks, "d-file-link") / "tests" / "id_rsa").symlink_to(secret_home / "id_rsa")
    hard = swe_task(tasks, "e-hard-link") / "repo" / "id_rsa"
    os.link(secret_home / "id_rsa", hard)
    (swe_task(tasks, "f-relative-link", "test -L calc_link && cat calc_link") / "tests" / "calc_link").symlink_to("test_calc.py")
    (tmp_path / "attack_rows.py").write_text(ATTACK_ROWS.format(tasks=str(tasks)))
    (tmp_path / "eval.toml").write_text(ATTACK_TOML)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "V1_SANDBOX_ROOT": str(tmp_path / "sb")}
    args = ["eval", "eval.toml", "-m", "m", "-b", mock.url, "-n", "-1", "-r", "1", "--output-dir", "out"]
    args += ["--state-columns", "program_result", "test_output"]
    result = subprocess.run(
        [sys.executable, "-m", "v1.cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "out").iterdir()
    saved = (run / "results.jsonl").read_text()
    assert SECRET not in saved and SECRET not in result.stdout + result.stderr
    lines = {json.loads(line)["info"]["task"]: json.loads(line) for line in saved.splitlines()}
    refused = {name: line["error"]["message"] for name, line in lines.items() if line["error"] is not None}
    assert sorted(refused) == ["a-repo-link", "b-tests-link", "c-inner-link", "d-file-link"] + (
        ["e-hard-link"] if os.geteuid() == 0 else []
    )
    for name, message in refused.items():
        assert "\n" not in message and "following no symlink" in message, (name, message)
    assert "is a symlink" in refused["a-repo-link"] and "is a symlink" in refused["b-tests-link"]
    assert "outside the folder being copied" in refused["c-inner-link"] + refused["d-file-link"]
    if os.geteuid() == 0:
        assert "not readable by the sandbox's user" in refused["e-hard-link"]
    assert lines["f-relative-link"]["error"] is None, lines["f-relative-link"]
    assert "class" in lines["f-relative-link"]["test_output"], lines["f-relative-link"]


def test_a_task_folder_or_task_file_that_is_a_symlink_is_refused_when_rows_load(tmp_path: Path, secret_home: Path) -> None:
    (secret_home.parent / "problem.md").write_text(SECRET)
    tasks = tmp_path / "tasks"
    (swe_task(tasks, "a") / "problem.md").unlink()
    (tasks / "a" / "problem.md").symlink_to(secret_home.parent / "problem.md")
    with pytest.raises(vf.TaskError, match=r"problem\.md"):
        swe.load_rows(tasks)
    shutil.rmtree(tasks / "a")
    (tasks / "a").symlink_to(ROOT / "tasksets" / "data" / "swe" / "calc-add", target_is_directory=True)
    with pytest.raises(vf.TaskError, match="a"):
        swe.load_rows(tasks)
    harbor_tasks = tmp_path / "harbor"
    shutil.copytree(ROOT / "tasksets" / "data" / "harbor", harbor_tasks)
    first = sorted(harbor_tasks.iterdir())[0]
    (first / "solution" / "solve.sh").unlink()
    (first / "solution" / "solve.sh").symlink_to(secret_home / "id_rsa")
    with pytest.raises(vf.TaskError, match=r"solve\.sh"):
        harbor.load_rows(harbor_tasks)


async def test_harbor_tests_linking_to_a_host_folder_are_refused_on_the_state(
    tmp_path: Path, mock: MockModelServer, secret_home: Path
) -> None:
    tasks = tmp_path / "harbor"
    shutil.copytree(ROOT / "tasksets" / "data" / "harbor", tasks)
    (secret_home / "test.sh").write_text("cat id_rsa\n")
    for folder in tasks.iterdir():
        relink(folder / "tests", secret_home)
    client = {"api_base_url": mock.url, "max_retries": 0}
    env = vf.load_environment(
        "harbor",
        taskset={"source": lambda: harbor.load_rows(tasks), "eval_source": lambda: harbor.load_rows(tasks)},
        harness={"program": {"command": ["true"]}, "client": client, "model": "m"},
    )
    results = await env.evaluate(num_examples=-1, rollouts_per_example=1, state_columns=["test_output"])
    for output in results["outputs"]:
        assert output["error"] is not None and "is a symlink" in output["error"]["message"]
        assert SECRET not in json.dumps(output)


HIJACK = "open('/workspace/hijacked', 'a').write('ran in a rollout of another row\\n')"


@pytest.mark.parametrize("scope", ["group", "global"])
async def test_a_rows_files_never_reach_a_sandbox_other_rollouts_share(mock: MockModelServer, scope: str) -> None:
    program = "python3 -c 'import openai' 2>/dev/null; cat hijacked 2>/dev/null; echo checked"
    harness = command_harness(mock, program, sandbox={"scope": scope})
    try:
        planted, victim = await harness.run_group([{"prompt": "a", "program": {"files": {"openai.py": HIJACK}}}, {"prompt": "b"}])
        assert planted["error"]["where"] == "task" and "task field 'program.files'" in planted["error"]["message"]
        assert f"scope {scope!r}" in planted["error"]["message"]
        assert victim["error"] is None and victim["program_result"]["stdout"] == "checked\n"
        assert (await harness.run({"prompt": "c", "program": {"files": {}}}))["error"] is None
    finally:
        await harness.teardown()  # a global-scope sandbox lives until then (its workspace is a mount)


BODY_FLOOD = r"""
import json, os, socket
from urllib.parse import urlsplit

url = urlsplit(os.environ["OPENAI_BASE_URL"])
head = (
    f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
    f"Authorization: Bearer {os.environ['OPENAI_API_KEY']}\r\nContent-Length: {{size}}\r\n\r\n"
)
def body(size):
    start = b'{"model": "m", "messages": [{"role": "user", "content": "'
    end = b'"}]}'
    return start + b"x" * (size - len(start) - len(end)) + end

def connect(size):
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(head.replace("{size}", str(size)).encode())
    return sock

def answer(sock):  # read by Content-Length: the relays inside the sandbox keep a half-closed connection open
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    sock.close()
    return head.split(b"\r\n", 1)[0].decode(), json.loads(body)

SIZE = int(os.environ["DECLARED"])
holder = connect(SIZE)
holder.sendall(body(SIZE)[: SIZE // 2])  # half its body: the endpoint is reading it
refused = [answer(connect(SIZE)) for _ in range(16)]  # each declares a body the rollout's budget can't hold
holder.sendall(body(SIZE)[SIZE // 2 :])
held = answer(holder)
again = connect(SIZE)
again.sendall(body(SIZE))
print(json.dumps({"refused": refused, "held": held[0], "again": answer(again)[0]}))
"""


async def test_a_rollout_holds_at_most_its_body_budget_however_many_connections_it_opens(
    mock: MockModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    max_body = 4 * 1024 * 1024
    monkeypatch.setenv("V1_ENDPOINT_MAX_BODY_BYTES", str(max_body))
    declared = 3 * 1024 * 1024  # under the largest body: only the budget stops a second one
    program = {"files": {"flood.py": BODY_FLOOD}, "env": {"DECLARED": str(declared)}}
    harness = command_harness(mock, "python3 flood.py", program=program, timeout_seconds=120)
    state = await harness.run({"prompt": "flood"})
    assert state["error"] is None, state["error"]
    assert state["program_result"]["stdout"].startswith("{"), state["program_result"]
    report = json.loads(state["program_result"]["stdout"])
    for status, body in report["refused"]:
        assert status == "HTTP/1.1 413 Request Entity Too Large"
        assert body["error"]["code"] == "request_too_large" and "of 4194304" in body["error"]["message"]
    assert report["held"] == "HTTP/1.1 200 OK" and report["again"] == "HTTP/1.1 200 OK"
    assert len(mock.requests) == 2  # only the two admitted bodies were read and sent on
