"""Command programs end to end: real processes (locally and in bubblewrap sandboxes) against the mock model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import growing_limits
from v1.sandbox import list_sandboxes, sandbox_root
from v1.testing import MockModelServer, Reply

OPENAI_AGENT = """
import os, sys, openai
client = openai.OpenAI()
prompt = open("prompt.txt").read() + " " + " ".join(sys.argv[1:]) + " " + sys.stdin.read()
answer = client.chat.completions.create(model="ignored", messages=[{"role": "user", "content": prompt}])
print("said:", answer.choices[0].message.content)
visible = {k: v for k, v in os.environ.items() if k.endswith(("KEY", "URL")) or k.startswith("EXTRA")}
open("out/env.json", "w").write(__import__("json").dumps(visible))
"""

CURL_AGENT = """set -e
curl -sS --fail-with-body "$OPENAI_BASE_URL/chat/completions" \\
  -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" \\
  -d '{"model": "x", "messages": [{"role": "user", "content": "from curl"}]}' > answer.json
curl -sS -o /dev/null -w '%{http_code}' "$OPENAI_BASE_URL/chat/completions" \\
  -H "Authorization: Bearer wrong-key" -H "Content-Type: application/json" \\
  -d '{"model": "x", "messages": [{"role": "user", "content": "no"}]}' > refused.txt
"""


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))
    return tmp_path / "sandboxes"


@pytest.fixture
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("V1_TEST_UPSTREAM_KEY", "sk-upstream-never-visible")
    return "sk-upstream-never-visible"


def harness(mock: MockModelServer, **kwargs: Any) -> vf.Harness:
    client = vf.ClientConfig(api_base_url=mock.url, api_key_var="V1_TEST_UPSTREAM_KEY", max_retries=0)
    return vf.Harness(client=client, model="test-model", **kwargs)


@pytest.mark.parametrize("sandbox", [None, vf.SandboxConfig()], ids=["local", "sandboxed"])
async def test_openai_sdk_agent_gets_only_its_endpoint(mock: MockModelServer, upstream_key: str, sandbox: Any) -> None:
    program = {
        "command": [sys.executable if sandbox is None else "python", "agent.py"],
        "args": ["from-args"],
        "files": {"agent.py": OPENAI_AGENT},
        "dirs": {},
        "setup": ["mkdir out"],
        "env": {"EXTRA_SETTING": "harness"},
        "bindings": {"files.prompt.txt": "task.info.text"},
        "stdin": "from-stdin",
        "artifacts": [{"path": "out/env.json", "name": "env", "format": "json"}],
    }
    task = {"prompt": "p", "info": {"text": "from-task"}, "program": {"env": {"EXTRA_TASK": "task"}}}
    state = await harness(mock, program=program, sandbox=sandbox, task_env=["EXTRA_TASK"]).run(task)
    assert state["error"] is None, state["error"]
    assert state["program_result"]["exit_code"] == 0
    assert state["program_result"]["stdout"] == "said: from-task from-args from-stdin\n"
    [step] = state["trajectory"]
    assert step["prompt"] == [{"role": "user", "content": "from-task from-args from-stdin"}]
    assert state["completion"] == [{"role": "assistant", "content": "from-task from-args from-stdin"}]
    env = state["artifacts"]["env"]
    assert set(env) == {
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "EXTRA_SETTING",
        "EXTRA_TASK",
    }
    assert env["OPENAI_BASE_URL"].endswith(f"/r/{state['trajectory_id']}/v1")
    assert env["ANTHROPIC_BASE_URL"] == env["OPENAI_BASE_URL"].removesuffix("/v1")
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] != upstream_key
    assert upstream_key not in json.dumps(state)
    assert mock.requests[0].body["model"] == "test-model"
    assert list_sandboxes() == []


async def test_curl_agent_in_a_sandbox_and_a_wrong_key_is_refused(mock: MockModelServer) -> None:
    mock.responder = lambda request: Reply.text("curl answered")
    program = {"command": ["sh", "agent.sh"], "files": {"agent.sh": CURL_AGENT}}
    program["artifacts"] = [{"path": "answer.json", "format": "json"}, "refused.txt"]
    state = await harness(mock, program=program, sandbox={"scope": "rollout"}).run({"prompt": "p"})
    assert state["error"] is None, state["program_result"]
    assert state["artifacts"]["answer.json"]["choices"][0]["message"]["content"] == "curl answered"
    assert state["artifacts"]["refused.txt"] == "401"
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["curl answered"]


async def test_exit_status_stderr_tail_and_missing_artifacts_are_recorded(mock: MockModelServer) -> None:
    program = {
        "command": ["sh", "-c", "echo progress; echo 'fatal: no plan' >&2; exit 3"],
        "artifacts": [{"path": "maybe.txt", "optional": True}, "required.txt"],
    }
    state = await harness(mock, program=program, sandbox={}).run({"prompt": "p"})
    assert state["program_result"] | {"duration": 0} == {
        "exit_code": 3,
        "stdout": "progress\n",
        "stderr": "fatal: no plan\n",
        "timed_out": False,
        "limit": None,
        "duration": 0,
    }
    assert state["error"]["type"] == "ProgramError" and state["error"]["where"] == "artifacts"
    assert "artifact 'required.txt' was not produced" in state["error"]["message"]
    assert "maybe.txt" not in state["error"]["message"]

    failing = await harness(mock, program={"command": ["sh", "-c", "echo 'fatal: no plan' >&2; exit 3"]}).run("p")
    assert failing["error"] == {
        "type": "ProgramError",
        "message": "command 'sh' exited with status 3: fatal: no plan",
        "where": "program",
    }


async def test_oversized_artifact_is_a_clear_error(mock: MockModelServer) -> None:
    program = {"command": ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x > big.txt"]}
    program["artifacts"] = [{"path": "big.txt", "max_bytes": 1000}]
    state = await harness(mock, program=program).run("p")
    assert state["error"]["where"] == "artifacts"
    assert "larger than its limit of 1000 bytes" in state["error"]["message"]


async def test_a_command_timed_out_by_an_upstream_outage_is_a_retryable_error(mock: MockModelServer) -> None:
    """A command killed at its timeout while its call retried a 503: a `ModelError`, as for in-process programs."""
    mock.responder = lambda request: Reply.fail(503, "overloaded", retry_after=0.2)
    program = {"command": ["sh", "-c", CURL_AGENT]}
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=1000)
    for limit in growing_limits(1.5):  # the limit must outlast the command's start and first 503: on a loaded machine, try longer
        mock.reset()
        state = await vf.Harness(client=client, model="m", program=program, timeout_seconds=limit).run("p")
        if mock.requests:
            break
    assert state["program_result"]["timed_out"]
    assert state["error"] is not None and state["error"]["type"] == "ModelError", state["error"]
    assert "still failing" in state["error"]["message"] and state["stop_condition"] == "has_error"


@pytest.mark.parametrize("sandbox", [None, {}], ids=["local", "sandboxed"])
async def test_timeout_kills_the_process_tree(mock: MockModelServer, sandbox: Any) -> None:
    marker = f"v1-hang-{os.getpid()}-{sandbox is None}"
    program = {"command": ["sh", "-c", f"(sleep 300; echo {marker}) & (sh -c 'sleep 301 # {marker}' &) ; sleep 302"]}
    state = await harness(mock, program=program, sandbox=sandbox, timeout_seconds=0.5).run("p")
    assert state["stop_condition"] == "timeout_reached" and state["error"] is None
    assert state["program_result"]["timed_out"] and state["program_result"]["exit_code"] == 137
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in _cmdline(pid)]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


async def test_task_overrides_program_and_sandbox_per_rollout(mock: MockModelServer) -> None:
    program = {"command": ["sh", "-c", 'echo "$GREETING $@" > out.txt', "sh"], "args": ["harness"], "env": {"GREETING": "hi"}}
    program["artifacts"] = ["out.txt"]
    h = harness(mock, program=program, sandbox={"memory_gb": 1}, task_env=["GREETING"])
    plain, overridden = await h.run_group(
        [
            {"prompt": "a"},
            {"prompt": "b", "program": {"args": ["task"], "env": {"GREETING": "hello"}}, "sandbox": {"memory_gb": 0.5}},
        ]
    )
    assert plain["artifacts"]["out.txt"] == "hi harness\n"
    assert overridden["artifacts"]["out.txt"] == "hello harness task\n"
    bad = await h.run({"prompt": "c", "sandbox": {"memory_gb": "lots"}})
    assert bad["error"]["where"] == "task" and "task field 'sandbox'" in bad["error"]["message"]
    assert "memory_gb" in bad["error"]["message"]


async def test_no_upstream_key_and_no_other_rollouts_endpoint(mock: MockModelServer, upstream_key: str) -> None:
    # Two rollouts share a group sandbox: the first publishes its endpoint URL there, the second
    # calls it with its own key while the first is still running.
    script = """
if [ "$ROLE" = first ]; then
  echo "$OPENAI_BASE_URL" > /workspace/first_url
  for i in $(seq 100); do [ -f /workspace/done ] && break; sleep 0.1; done
else
  for i in $(seq 100); do [ -f /workspace/first_url ] && break; sleep 0.1; done
  curl -s -o /dev/null -w '%{http_code}' "$(cat /workspace/first_url)/chat/completions" \\
    -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" \\
    -d '{"model": "x", "messages": [{"role": "user", "content": "steal"}]}' > status.txt
  (env; cat /proc/*/environ 2>/dev/null) | tr '\\0' '\\n' > env.txt
  touch /workspace/done
fi
"""
    program = {"command": ["sh", "-c", script], "bindings": {"env.ROLE": "task.info.role"}}
    program["artifacts"] = [{"path": "status.txt", "optional": True}, {"path": "env.txt", "optional": True}]
    h = harness(mock, program=program, sandbox={"scope": "group"})
    first, second = await h.run_group([{"prompt": "a", "info": {"role": "first"}}, {"prompt": "b", "info": {"role": "second"}}])
    assert first["error"] is None and second["error"] is None
    assert second["artifacts"]["status.txt"] == "401"
    assert "OPENAI_API_KEY=v1-" in second["artifacts"]["env.txt"] and upstream_key not in second["artifacts"]["env.txt"]
    assert first["trajectory"] == [] and second["trajectory"] == []
    assert list_sandboxes() == [] and not any((sandbox_root() / "local").iterdir())


async def test_sandbox_lifetime_is_enforced_apart_from_the_program_timeout(mock: MockModelServer) -> None:
    program = {"command": ["sh", "-c", "sleep 30"]}
    # 6 s of lifetime: long enough for the command to start on a loaded machine (at 0.6 s, CI once
    # deleted the sandbox before the command ran), far short of the program's 30 s and its 60 s timeout.
    # On a machine loaded past that, the lifetime ends before the command starts: 125, the sandbox gone under it.
    state = await harness(mock, program=program, sandbox={"timeout_minutes": 0.1}, timeout_seconds=60).run("p")
    assert state["program_result"]["exit_code"] in (137, 125) and state["program_result"]["duration"] < 20
    assert state["error"]["type"] == "ProgramError"
    assert list_sandboxes() == []


async def test_a_sandbox_whose_lifetime_ends_before_its_command_starts_is_the_commands_error(mock: MockModelServer) -> None:
    """The sandbox is deleted while the command is being started: the rollout's error says what the command
    met, not a `KeyError` from the endpoint socket's bookkeeping, which the deletion had already closed."""
    program = {"command": ["sh", "-c", "sleep 30"]}
    state = await harness(mock, program=program, sandbox={"timeout_minutes": 0.00001}, timeout_seconds=60).run("p")
    assert state["error"]["type"] == "ProgramError", state["error"]
    assert state["program_result"]["exit_code"] in (137, 125) and state["program_result"]["duration"] < 20
    assert list_sandboxes() == []


async def test_packages_are_installed_into_the_workspace(mock: MockModelServer) -> None:
    program = {"command": ["python", "-c", "import iniconfig; print(iniconfig.__file__)"]}
    state = await harness(mock, program=program, sandbox={"packages": ["iniconfig"]}).run("p")
    assert state["error"] is None, state["program_result"]
    assert state["program_result"]["stdout"].startswith("/workspace/.v1/python/iniconfig/")


async def test_tasksets_and_toolsets_declare_artifacts_too(mock: MockModelServer) -> None:
    taskset = vf.Taskset(source=[{"prompt": "p"}], config={"artifacts": [{"path": "by-taskset.json", "format": "json"}]})
    toolset = vf.Toolset(config={"name": "t", "artifacts": [{"path": "by-toolset.txt", "optional": True}, "missing.txt"]})
    program = {"command": ["sh", "-c", "echo '{\"a\": 1}' > by-taskset.json; echo tool > by-toolset.txt"]}
    h = harness(mock, program=program, sandbox={}, toolsets=[toolset], taskset=taskset)
    state = await h.run({"prompt": "p"})
    assert state["artifacts"] == {"by-taskset.json": {"a": 1}, "by-toolset.txt": "tool\n"}
    assert state["error"]["where"] == "artifacts" and "'missing.txt' was not produced" in state["error"]["message"]
