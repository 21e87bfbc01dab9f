"""Round 3 of task rows as outside data: a row's `env` names only what the harness declares
(`task_env`), a row's tool visibility stays within the toolsets' visible tools, and a row's turn
limit stays within the harness's, set or default.

Written as the attacker sends them: rows handed to a real harness whose program is a real host
process (the official openai SDK against the rollout's endpoint), a loopback "proxy" that must
receive nothing, and marker files that must not appear.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer, Reply

NARROWS = "outside data narrows what the harness configured, never widens it"
AGENT = """
import os, openai
reply = openai.OpenAI(max_retries=0, timeout=30).chat.completions.create(
    model=os.environ["V1_MODEL"], messages=[{"role": "user", "content": "hi"}]
)
print(reply.choices[0].message.content)
"""


class Listener:
    """A loopback TCP server (the attacker's "proxy") that records every byte sent to it and answers nothing."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.received = bytearray()
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            with connection:
                connection.settimeout(5)
                try:
                    self.received += connection.recv(65536)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def proxy() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


def host_agent_harness(mock: MockModelServer, **kwargs: Any) -> vf.Harness:
    """A harness whose program is a host process calling the model with the openai SDK."""
    return vf.Harness(
        program={"command": [sys.executable, "-c", AGENT]},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=120,
        **kwargs,
    )


def assert_refused(state: vf.State, field: str) -> None:
    error = state["error"]
    assert error is not None and error["type"] == "TaskError", error
    assert error["message"].startswith(f"task field '{field}': ") and NARROWS in error["message"], error
    assert "\n" not in error["message"]
    assert "program_result" not in state and state["trajectory"] == []


@pytest.mark.parametrize("name", ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "HTTPS_PROXY", "all_proxy"])
async def test_a_row_cannot_send_the_rollouts_key_through_its_proxy(mock: MockModelServer, proxy: Listener, name: str) -> None:
    state = await host_agent_harness(mock).run({"prompt": "p", "program": {"env": {name: proxy.url, "NO_PROXY": ""}}})
    assert_refused(state, f"program.env.{name}")
    assert proxy.connections == 0 and bytes(proxy.received) == b""
    assert mock.requests == []


async def test_a_row_cannot_make_the_program_create_a_file_through_sslkeylogfile(mock: MockModelServer, tmp_path: Path) -> None:
    marker = tmp_path / "created-by-row"
    state = await host_agent_harness(mock).run({"prompt": "p", "program": {"env": {"SSLKEYLOGFILE": str(marker)}}})
    assert_refused(state, "program.env.SSLKEYLOGFILE")
    assert not marker.exists()


async def test_a_row_cannot_run_code_in_a_harness_shell_through_shellopts_and_ps4(mock: MockModelServer, tmp_path: Path) -> None:
    marker = tmp_path / "ran-from-ps4"
    harness = vf.Harness(
        program={"command": ["bash", "-c", "true; echo done"]},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        timeout_seconds=120,
    )
    row = {"env": {"SHELLOPTS": "xtrace", "PS4": f"$(touch {marker})"}}
    state = await harness.run({"prompt": "p", "program": row})
    assert_refused(state, "program.env.SHELLOPTS")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("UV_INDEX_URL", "http://127.0.0.1:9/simple"),
        ("JAVA_TOOL_OPTIONS", "-javaagent:/tmp/evil.jar"),
        ("XDG_CONFIG_HOME", "/tmp/attacker-config"),
        ("LESSOPEN", "|touch /tmp/pwned %s"),
        ("OPENSSL_CONF", "/tmp/evil.cnf"),
        ("CLAUDE_CODE_USE_BEDROCK", "1"),
    ],
)
async def test_a_row_env_name_the_harness_did_not_declare_is_refused(mock: MockModelServer, name: str, value: str) -> None:
    state = await host_agent_harness(mock, task_env=["GREETING"]).run({"prompt": "p", "program": {"env": {name: value}}})
    assert_refused(state, f"program.env.{name}")
    assert "(its task_env: GREETING)" in state["error"]["message"]


async def test_a_declared_name_still_reaches_the_program(mock: MockModelServer) -> None:
    harness = vf.Harness(
        program={"command": ["sh", "-c", 'echo "$GREETING"']},
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="m",
        task_env=["GREETING"],
        timeout_seconds=120,
    )
    declared, undeclared = await harness.run_group(
        [
            {"prompt": "a", "program": {"env": {"GREETING": "héllo"}}},
            {"prompt": "b", "program": {"env": {"GREETING": "hi", "greeting": "x"}}},
        ]
    )
    assert declared["error"] is None and declared["program_result"]["stdout"] == "héllo\n"
    assert_refused(undeclared, "program.env.greeting")


@pytest.mark.parametrize(
    ("task_env", "wrong"),
    [(["*"], "'*'"), (["HTTP_*"], "'HTTP_*'"), (["A=B"], "'A=B'"), ([""], "''"), ("GREETING", "valid list")],
)
def test_task_env_names_each_variable_and_has_no_wildcard(task_env: Any, wrong: str) -> None:
    with pytest.raises(vf.ConfigError) as caught:
        vf.Harness(program={"command": ["true"]}, task_env=task_env)
    message = str(caught.value)
    assert "task_env" in message and wrong in message and "\n" not in message, message


def test_task_env_in_a_config_builds_the_same_harness() -> None:
    config = vf.HarnessConfig({"program": {"command": ["true"]}, "task_env": ["GREETING", "LEVEL"]})
    assert vf.Harness(config=config).config.task_env == ["GREETING", "LEVEL"]
    with pytest.raises(vf.ConfigError, match="task_env"):
        vf.HarnessConfig({"task_env": ["*"]})


def tool_harness(mock: MockModelServer, marker: Path, **kwargs: Any) -> vf.Harness:
    """The base tool loop with a toolset that hides `wipe`, a tool that leaves `marker` when it runs."""

    def lookup(word: str) -> str:
        """Look a word up."""
        return word.upper()

    def wipe() -> str:
        """Delete the user's data (hidden: the harness never offers it)."""
        marker.write_text("ran")
        return "wiped"

    toolset = vf.Toolset([lookup, wipe], name="ops", hide=["wipe"])
    return vf.Harness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", toolsets=[toolset], max_turns=3, **kwargs
    )


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        ({"show": ["wipe"]}, "tools.show"),
        ({"show": ["lookup", "wipe"]}, "tools.show"),
        ({"ops": {"show": ["wipe"]}}, "tools.ops.show"),
    ],
)
async def test_a_row_cannot_show_a_tool_the_toolset_hides(
    mock: MockModelServer, tmp_path: Path, tools: dict[str, Any], field: str
) -> None:
    marker = tmp_path / "wiped"
    mock.script(Reply.tool("wipe", {}), Reply.text("done"))
    state = await tool_harness(mock, marker).run({"prompt": "p", "tools": tools})
    error = state["error"]
    assert error is not None and error["type"] == "TaskError", error
    assert error["message"].startswith(f"task field '{field}': ['wipe'] hidden by the toolset") and NARROWS in error["message"]
    assert not marker.exists() and mock.requests == []


async def test_the_models_call_to_a_hidden_tool_is_answered_as_unknown_and_never_runs(
    mock: MockModelServer, tmp_path: Path
) -> None:
    marker = tmp_path / "wiped"
    mock.script(Reply.tool("wipe", {}), Reply.text("done"))
    state = await tool_harness(mock, marker).run({"prompt": "p", "tools": {"hide": ["lookup"]}})
    assert state["error"] is None and state["tool_defs"] == []
    assert not marker.exists()
    answer = state["completion"][1]
    assert answer["role"] == "tool" and answer["content"].startswith("Error: unknown tool 'wipe'")


async def test_a_row_still_narrows_the_visible_tools(mock: MockModelServer, tmp_path: Path) -> None:
    state = await tool_harness(mock, tmp_path / "wiped").run({"prompt": "p", "tools": {"ops": {"show": ["lookup"]}}})
    assert state["error"] is None and [tool["name"] for tool in state["tool_defs"]] == ["lookup"]


async def test_a_row_cannot_raise_the_default_turn_limit_when_the_user_set_none(mock: MockModelServer) -> None:
    async def chatty(task: vf.Task, state: vf.State) -> None:
        while True:
            await state.get_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])

    harness = vf.Harness(program=chatty, client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m")
    assert "max_turns" not in harness.config.model_fields_set and harness.config.max_turns == 10
    raised, lowered = await harness.run_group([{"prompt": "a", "max_turns": 1000}, {"prompt": "b", "max_turns": 3}])
    assert raised["stop_condition"] == "max_turns_reached" and len(raised["trajectory"]) == 10
    assert lowered["stop_condition"] == "max_turns_reached" and len(lowered["trajectory"]) == 3
    assert len(mock.requests) == 13
