"""The generic command harness: an agent that gives up on a stream and retries it (no retry header), exits
non-zero after answering, or never answers; and its config's bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import v1 as vf
from harnesses import CodexHarness, CommandAgentHarness
from harnesses.compat import AGENTS_DOC, COMPAT_JSON, load_findings, main, render_doc
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, Reply

RETRYING_AGENT = """
import http.client, json, os, sys, urllib.parse

url = urllib.parse.urlparse(os.environ["MY_URL"])
prompt = open(os.environ["V1_PROMPT_FILE"]).read()
body = json.dumps({"model": sys.argv[1], "messages": [{"role": "user", "content": prompt}], "stream": True})
headers = {"Authorization": "Bearer " + os.environ["MY_KEY"], "Content-Type": "application/json"}

def call(read_all):
    connection = http.client.HTTPConnection(url.hostname, url.port)
    connection.request("POST", url.path + "/chat/completions", body, headers)
    response = connection.getresponse()
    data = response.read() if read_all else response.read1(64)
    connection.close()
    return data.decode()

call(read_all=False)  # gives up after the first bytes, as a client whose read timed out would
answer = "".join(
    json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
    for line in call(read_all=True).splitlines()
    if line.startswith("data: {") and json.loads(line[6:])["choices"]
)
print(answer)
sys.exit(int(os.environ.get("EXIT_STATUS", "0")))
"""


def harness(mock: MockModelServer, **config: object) -> CommandAgentHarness:
    return CommandAgentHarness(
        client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
        model="mock-model",
        timeout_seconds=HANG_S,
        config={
            "command": ["python", "agent.py", "{model}"],
            "endpoint_env": {"MY_URL": "openai_base_url", "MY_KEY": "api_key"},
            **config,
        },
    )


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def run(mock: MockModelServer, exit_status: int) -> vf.State:
    agent = harness(mock, agent_env={"EXIT_STATUS": str(exit_status)}, files={"agent.py": RETRYING_AGENT})
    return await agent.run({"prompt": "say something"})


async def test_a_retried_stream_is_one_turn_and_a_nonzero_exit_after_answering_is_scored() -> None:
    with MockModelServer() as mock:
        mock.script(Reply.text("first answer, abandoned by the agent", stream_delay=0.2), Reply.text("second answer"))
        state = await run(mock, exit_status=3)
    assert state["program_result"]["exit_code"] == 3
    assert state["program_result"]["stdout"].strip() == "second answer"
    assert state["error"] is None
    assert len(mock.requests) == 2
    assert [step["completion"][0]["content"] for step in state["trajectory"]] == ["second answer"]


async def test_a_task_that_overrides_the_program_keeps_the_agent_wrapper() -> None:
    with MockModelServer() as mock:
        mock.script(Reply.text("abandoned", stream_delay=0.2), Reply.text("answered"))
        agent = harness(mock, agent_env={"EXIT_STATUS": "0"}, files={"agent.py": RETRYING_AGENT}, task_env=["EXIT_STATUS"])
        state = await agent.run({"prompt": "say something", "program": {"env": {"EXIT_STATUS": "4"}}})
    assert state["program_result"]["exit_code"] == 4  # the task's env reached the agent
    assert state["error"] is None  # and its non-zero exit after answering is still forgiven by the agent wrapper


async def test_a_nonzero_exit_without_an_answer_is_an_error() -> None:
    with MockModelServer() as mock:
        mock.script(Reply.text("abandoned", stream_delay=0.2), Reply.tool("nothing", {}))
        state = await run(mock, exit_status=3)
    assert state["error"] is not None and state["error"]["type"] == "ProgramError"
    assert "exited with status 3" in state["error"]["message"]


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        ({"command": []}, "command"),
        ({"command": ["x"], "endpoint_env": {"A": "upstream_key"}}, "endpoint_env"),
        ({"command": ["x"], "program": {"command": ["y"]}}, "builds its own program"),
        ({"command": ["x"], "sandbox": {"mounts": {"relative": "/tmp"}}}, "must be absolute"),
        ({"command": ["x"], "sandbox": {"mounts": {"/workspace": "/tmp"}}}, "would hide"),
    ],
)
def test_bad_config_is_one_clear_error(config: dict[str, object], fragment: str) -> None:
    with pytest.raises(vf.ConfigError, match=fragment):
        CommandAgentHarness(config=config)


def test_the_agents_page_shows_the_tests_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    findings = load_findings(COMPAT_JSON)
    assert {"codex", "claude_code"} <= set(findings)
    page = AGENTS_DOC.read_text()
    assert render_doc(page, findings) == page, "docs/agents.md is stale: run python -m harnesses.compat"
    assert main([str(tmp_path / "missing.json"), str(tmp_path / "missing.md")]) == 2
    assert "harnesses.compat:" in capsys.readouterr().err
    broken = tmp_path / "page.md"
    broken.write_text("no markers")
    (tmp_path / "agents.json").write_text(json.dumps({"agents": {}}))
    assert main([str(tmp_path / "agents.json"), str(broken)]) == 2


def test_other_backends_install_the_agent_in_the_sandbox() -> None:
    agent = CodexHarness(model="m", sandbox={"backend": "prime", "scope": "group"})
    sandbox = agent.config.sandbox
    assert sandbox is not None and sandbox.mounts == {} and sandbox.packages == ["npm:@openai/codex@0.169.0"]
    assert agent.config.program is not None
    assert 'export PATH="/workspace/.v1/node/node_modules/.bin:$PATH"' in agent.config.program.files[".v1-agent/run.sh"]
    assert agent.program.package is None  # type: ignore[attr-defined]  # nothing installed on this machine
    local = CodexHarness(model="m", config={"version": "0.168.0"})
    assert local.config.sandbox is not None and "/opt/v1-npm" in local.config.sandbox.mounts
    assert "@openai+codex@0.168.0" in local.config.program.files[".v1-agent/run.sh"]  # type: ignore[union-attr]
