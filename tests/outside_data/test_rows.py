"""Task rows and dataset columns are outside data: they narrow the harness, never widen it (S1).

Each attack is sent as an attacker would: JSONL rows read by a taskset and run by `v1 eval` as a
subprocess against a harness with a real local sandbox, or a row handed to `Harness.run`. A refused
row fails alone with one line naming its field; the other rows of the eval finish unharmed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer

ROOT = Path(__file__).resolve().parents[2]
AGENT = """
import os, openai
reply = openai.OpenAI().chat.completions.create(model=os.environ["V1_MODEL"], messages=[{"role": "user", "content": "hi"}])
print(reply.choices[0].message.content)
"""
ROWS_SOURCE = """
import json
from pathlib import Path

def load_rows():
    return [json.loads(line) for line in Path(__file__).with_name("rows.jsonl").read_text().splitlines()]
"""
NARROWS = "outside data narrows what the harness configured, never widens it"


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


def run_eval(tmp_path: Path, mock: MockModelServer, rows: list[dict[str, Any]], command: str) -> list[dict[str, Any]]:
    """`v1 eval` of `rows` (a JSONL file) with a sandboxed command harness; the saved results, in row order."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "rows_src.py").write_text(ROWS_SOURCE)
    config = f"""
        [env]
        name = "rows"
        [env.taskset]
        taskset_id = "rows"
        source = "rows_src:load_rows"
        [env.harness]
        max_turns = 1
        timeout_seconds = 120
        [env.harness.program]
        command = ["sh", "-c", {json.dumps(command)}]
        files = {{ "agent.py" = {json.dumps(AGENT)} }}
        [env.harness.sandbox]
        memory_gb = 1
        disk_size_gb = 1
    """
    (tmp_path / "eval.toml").write_text(textwrap.dedent(config))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "V1_SANDBOX_ROOT": str(tmp_path / "sb")}
    args = ["eval", "eval.toml", "-m", "m", "-b", mock.url, "-n", str(len(rows)), "-r", "1", "--output-dir", "out"]
    args += ["--state-columns", "program_result"]
    result = subprocess.run(
        [sys.executable, "-m", "v1.cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "out").iterdir()
    saved = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    return sorted(saved, key=lambda line: line["example_id"])


def test_s1_rows_cannot_turn_the_sandbox_off_or_copy_host_dirs_through_v1_eval(tmp_path: Path, mock: MockModelServer) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.pem").write_text("PRIVATE-KEY-MATERIAL")
    (secret / "key.pem").chmod(0o600)
    marker = tmp_path / "ran-on-host"
    attack = ["sh", "-c", f"id -u > {marker}-$ROW"]
    rows = [
        {"prompt": "fine"},
        {"prompt": "off", "program": {"command": attack, "sandbox": False, "env": {"ROW": "command-false"}}},
        {"prompt": "off", "program": {"sandbox": False, "env": {"ROW": "false"}}},
        {"prompt": "off", "program": {"sandbox": {}, "env": {"ROW": "empty"}}},
        {"prompt": "off", "program": {"sandbox": None, "env": {"ROW": "null"}}},
        {"prompt": "off", "program": {"fn": "os:system", "env": {"ROW": "fn"}}},
        {"prompt": "dirs", "program": {"dirs": {"stolen": str(secret)}}},
        {"prompt": "net", "sandbox": {"network_access": True}},
        {"prompt": "mem", "sandbox": {"memory_gb": 64}},
        {"prompt": "mounts", "sandbox": {"mounts": {"/stolen": str(secret)}}},
        {"prompt": "fine too"},
    ]
    # The harness's own command leaves a marker only where the host's tmp_path exists: on the host.
    saved = run_eval(tmp_path, mock, rows, f"touch {marker}-$ROW 2>/dev/null; exec python agent.py")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(marker.name)) == []
    assert "PRIVATE-KEY-MATERIAL" not in json.dumps(saved)
    refused = {
        1: "program.command",
        2: "program.sandbox",
        3: "program.sandbox",
        4: "program.sandbox",
        5: "program.fn",
        6: "program.dirs",
        7: "sandbox.network_access",
        8: "sandbox.memory_gb",
        9: "sandbox.mounts",
    }
    for index, field in refused.items():
        error = saved[index]["error"]
        assert error is not None and error["type"] == "TaskError", (index, error)
        assert error["message"].startswith(f"task field '{field}': ") and NARROWS in error["message"], error
        assert "\n" not in error["message"] and saved[index]["program_result"] is None
    for index in (0, 10):  # the other rows ran sandboxed (as the sandbox user) and called the model
        assert saved[index]["error"] is None, saved[index]["error"]
        assert saved[index]["program_result"]["exit_code"] == 0
        assert saved[index]["completion"][-1]["content"] == "hi"


def harness(mock: MockModelServer, **kwargs: Any) -> vf.Harness:
    kwargs.setdefault("timeout_seconds", 120)
    return vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", **kwargs)


SANDBOXED = {"program": {"command": ["sh", "-c", "id -u"]}, "sandbox": {"memory_gb": 1}}
ON_HOST = {"program": {"command": ["sh", "-c", "echo host"]}}


@pytest.mark.parametrize(
    ("setup", "row", "field"),
    [
        (ON_HOST, {"env": {"PATH": "."}}, "program.env.PATH"),
        (ON_HOST, {"env": {"LD_PRELOAD": "./evil.so"}}, "program.env.LD_PRELOAD"),
        (ON_HOST, {"env": {"ld_library_path": "."}}, "program.env.ld_library_path"),
        (ON_HOST, {"env": {"PYTHONPATH": "."}}, "program.env.PYTHONPATH"),
        (ON_HOST, {"env": {"BASH_ENV": "./rc"}}, "program.env.BASH_ENV"),
        (ON_HOST, {"env": {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}}, "program.env.OPENAI_BASE_URL"),
        (ON_HOST, {"files": {"openai.py": "import os; os.system('id')"}}, "program.files"),
        (ON_HOST, {"setup": ["id -u > /tmp/pwned"]}, "program.setup"),
        (ON_HOST, {"bindings": {"env.X": "task.answer"}}, "program.bindings"),
        (ON_HOST, {"artifacts": ["/etc/shadow"]}, "program.artifacts[0]"),
        (ON_HOST, {"artifacts": [{"path": "../../etc/shadow"}]}, "program.artifacts[0]"),
        (ON_HOST, {"base": True}, "program.base"),
        (ON_HOST, "other", "program.name"),
        (SANDBOXED, {"sandbox": True}, "program.sandbox"),
        (SANDBOXED, {"sandbox": "off"}, "program.sandbox"),
        (SANDBOXED, {"env": {"LD_PRELOAD": "x"}}, "program.env.LD_PRELOAD"),
        ({"program": {"base": True}}, {"artifacts": ["notes.txt"]}, "program.artifacts"),
    ],
)
async def test_a_row_program_field_that_widens_is_refused_and_nothing_runs(
    mock: MockModelServer, setup: dict[str, Any], row: Any, field: str
) -> None:
    state = await harness(mock, **setup).run({"prompt": "p", "program": row})
    assert state["error"] is not None and state["error"]["type"] == "TaskError", state["error"]
    assert state["error"]["message"].startswith(f"task field '{field}': ") and NARROWS in state["error"]["message"]
    assert "program_result" not in state and state["trajectory"] == []


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"backend": "prime"}, "sandbox.backend"),
        ({"packages": ["evil"]}, "sandbox.packages"),
        ({"setup_commands": ["id"]}, "sandbox.setup_commands"),
        ({"env": {"LD_PRELOAD": "x"}}, "sandbox.env"),
        ({"scope": "global"}, "sandbox.scope"),
        ({"timeout_minutes": 10_000}, "sandbox.timeout_minutes"),
        ({"disk_size_gb": 1e300}, "sandbox.disk_size_gb"),
        ({"cpu_cores": 64}, "sandbox.cpu_cores"),
    ],
)
async def test_a_row_sandbox_field_may_only_tighten(mock: MockModelServer, row: dict[str, Any], field: str) -> None:
    state = await harness(mock, **SANDBOXED).run({"prompt": "p", "sandbox": row})
    assert state["error"] is not None and state["error"]["message"].startswith(f"task field '{field}': "), state["error"]
    assert "program_result" not in state


@pytest.mark.parametrize("row", [{"sandbox": None}, {"sandbox": {}}, {"program": {}}, {"program": None}])
async def test_empty_row_fields_keep_the_sandbox(mock: MockModelServer, row: dict[str, Any]) -> None:
    state = await harness(mock, **SANDBOXED).run({"prompt": "p", **row})
    assert state["error"] is None and state["program_result"]["stdout"].strip() != str(os.getuid())


async def test_a_row_tightens_a_limit_and_adds_data_to_the_harness_program(mock: MockModelServer) -> None:
    program = {"command": ["sh", "-c", 'echo "$GREETING $0"; cat task.txt; head -c 2000000 /dev/zero > f']}
    h = harness(mock, program=program, task_env=["GREETING"])
    row = {"args": ["from-row"], "env": {"GREETING": "héllo \u202e"}, "files": {"task.txt": "row file\n"}}
    state = await h.run({"prompt": "p", "program": row, "sandbox": {"memory_gb": 0.5, "disk_size_gb": 0.001}})
    assert state["program_result"]["stdout"].startswith("héllo \u202e from-row\nrow file\n")
    assert state["error"] is not None and "hit the sandbox's disk limit" in state["error"]["message"]


async def test_a_harness_opts_in_to_rows_choosing_a_program_by_name(mock: MockModelServer) -> None:
    h = harness(
        mock,
        program={"command": ["sh", "-c", "echo default"]},
        task_programs={"upper": {"command": ["sh", "-c", 'echo "upper $0"']}},
        sandbox={"memory_gb": 1},
    )
    chosen, with_data, unknown = await h.run_group(
        [
            {"prompt": "a", "program": "upper"},
            {"prompt": "b", "program": {"name": "upper", "args": ["x"]}},
            {"prompt": "c", "program": "nope"},
        ]
    )
    assert chosen["program_result"]["stdout"] == "upper sh\n" and with_data["program_result"]["stdout"] == "upper x\n"
    assert unknown["error"]["message"] == "task field 'program.name': 'nope' is not one of the harness's task_programs ['upper']"


async def test_a_row_cannot_replace_an_in_process_fn_with_a_command(mock: MockModelServer, tmp_path: Path) -> None:
    ran: list[str] = []

    async def agent(task: vf.Task, state: vf.State) -> None:
        ran.append(task["prompt"][0]["content"])

    h = harness(mock, program=agent)
    marker = tmp_path / "pwned"
    bad, data = await h.run_group(
        [{"prompt": "a", "program": {"command": ["touch", str(marker)]}}, {"prompt": "b", "program": {"args": ["x"]}}]
    )
    assert bad["error"]["message"].startswith("task field 'program.command': ")
    assert data["error"]["message"].startswith("task field 'program.args': the harness's program runs in process")
    assert not marker.exists() and ran == []


@pytest.mark.parametrize(
    "name", ["A=B", "", "X\u0000", "PÁTH", "1" + "x" * 100_000], ids=["equals", "empty", "nul", "unicode", "overlong"]
)
async def test_odd_env_names_from_a_row_are_one_line(mock: MockModelServer, name: str) -> None:
    state = await harness(mock, **ON_HOST).run({"prompt": "p", "program": {"env": {name: "v"}}})
    message = state["error"]["message"]
    assert message.startswith("task field 'program.env': ") and "is not a variable name" in message and len(message) < 300


@pytest.mark.parametrize("path", ["../escape.txt", "/escape.txt", "link/pwned", "link/../../escape.txt"])
async def test_row_files_stay_beneath_the_workspace_even_through_a_symlink(
    mock: MockModelServer, tmp_path: Path, path: str
) -> None:
    # The harness's own setup leaves a symlink to a host directory in the workspace; the row aims through it.
    target = tmp_path / "host-dir"
    target.mkdir()
    sandbox = {"memory_gb": 1, "setup_commands": [f"ln -s {target} link"]}
    h = harness(mock, program={"command": ["sh", "-c", "ls"]}, sandbox=sandbox)
    state = await h.run({"prompt": "p", "program": {"files": {path: "row data"}}})
    assert state["error"] is not None and "\n" not in state["error"]["message"], state["error"]
    assert list(target.iterdir()) == [] and not (tmp_path / "escape.txt").exists()
    assert "program_result" not in state


async def test_a_row_lowers_the_users_turn_limit_but_never_raises_it(mock: MockModelServer) -> None:
    async def chatty(task: vf.Task, state: vf.State) -> None:
        while True:
            await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])

    h = harness(mock, program=chatty, max_turns=3)
    raised, lowered = await h.run_group([{"prompt": "a", "max_turns": 1000}, {"prompt": "b", "max_turns": 2}])
    assert raised["stop_condition"] == "max_turns_reached" and len(raised["trajectory"]) == 3
    assert lowered["stop_condition"] == "max_turns_reached" and len(lowered["trajectory"]) == 2
