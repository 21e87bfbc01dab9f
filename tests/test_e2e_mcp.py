"""End to end: real MCP servers (tests/tools/mcp_server.py, written with the `mcp` SDK's server
side) started as subprocesses over stdio and HTTP, called by the base loop and by programs."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import v1 as vf
from tests.tools.patience import HANG_S, wait_until
from v1.testing import MockModelServer, MockRequest, Reply

SERVER = str(Path(__file__).parent / "tools" / "mcp_server.py")


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains `marker` (read from /proc: the process table)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                status = (entry / "status").read_text()
            except OSError:
                continue
            if marker.encode() in cmdline and "State:\tZ" not in status:
                found.append(int(entry.name))
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    value = f"v1-test-{uuid.uuid4().hex}"
    yield value
    assert processes_with(value) == [], "an MCP server process was left behind"


def server(marker: str, **kwargs: Any) -> vf.MCPTool:
    return vf.MCPTool(sys.executable, [SERVER, "--marker", marker], **kwargs)


def call_then_answer(name: str, arguments: dict[str, Any] | None = None) -> Any:
    def responder(request: MockRequest) -> Reply:
        if request.last_message.get("role") == "tool":
            return Reply.text(f"got {request.last_message['content']}")
        return Reply.tool(name, arguments or {})

    return responder


async def test_mcp_tools_are_listed_called_and_the_server_stopped(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    mock.responder = call_then_answer("add", {"a": 2, "b": 40})
    state = await make_harness(toolsets=[vf.Toolset([server(marker)])]).run("2+40?")
    assert state["error"] is None
    tools = {t["function"]["name"]: t["function"] for t in mock.requests[0].tools}
    assert set(tools) == {"add", "wait", "echo", "pid", "pixel", "fail", "rendezvous", "die"}
    assert tools["add"]["description"].startswith("Add two integers.")
    assert tools["add"]["parameters"]["required"] == ["a", "b"]
    assert state["completion"][1] == {
        "role": "tool",
        "tool_call_id": state["completion"][0]["tool_calls"][0]["id"],
        "content": "42",
    }
    assert state["completion"][-1]["content"] == "got 42"


async def test_image_and_error_results_become_tool_messages(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    mock.script(Reply.tool("pixel").and_tool("fail", {"message": "no luck"}), Reply.text("done"))
    state = await make_harness(toolsets=[vf.Toolset([server(marker)])]).run("go")
    image, error = state["completion"][1]["content"], state["completion"][2]["content"]
    assert image[0]["type"] == "image_url" and image[0]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    assert error == "Error: Error executing tool fail: no luck"
    assert mock.requests[1].messages[-2]["content"] == image  # the model received the image part


async def test_programs_call_mcp_tools_through_get_tools(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    async def program(task: vf.Task, state: vf.State) -> None:
        tools = state.get_tools()
        state["sum"] = await tools["add"](a=1, b=2)
        state["echo"] = await tools["echo"](text="hi")
        try:
            await tools["fail"](message="bad")
        except vf.ToolError as exc:
            state["failure"] = str(exc)

    state = await make_harness(program=program, toolsets=[vf.Toolset([server(marker)])]).run("x")
    assert (state["sum"], state["echo"], state["failure"]) == (3, "hi", "Error executing tool fail: bad")


async def test_colliding_mcp_tool_names_are_prefixed(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    def add(a: int, b: int) -> int:
        """Python's add."""
        return a - b  # distinguishable from the server's

    mock.script(Reply.tool("add", {"a": 5, "b": 1}).and_tool("calc_add", {"a": 5, "b": 1}), Reply.text("done"))
    toolsets = [vf.Toolset([add]), vf.Toolset([server(marker, name="calc")], hide=["die", "pixel"])]
    state = await make_harness(toolsets=toolsets).run("go")
    assert [t["function"]["name"] for t in mock.requests[0].tools] == [
        "add",
        "calc_add",
        "wait",
        "echo",
        "pid",
        "fail",
        "rendezvous",
    ]
    assert [m["content"] for m in state["completion"][1:3]] == ["4", "6"]


async def test_mcp_bindings_fill_hidden_arguments(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    mock.responder = call_then_answer("echo")
    toolset = vf.Toolset([server(marker)], bindings={"echo.text": "task.info.word"}, show=["echo"])
    state = await make_harness(toolsets=[toolset]).run({"prompt": "x", "info": {"word": "bound"}})
    assert mock.requests[0].tools[0]["function"]["name"] == "echo"
    assert mock.requests[0].tools[0]["function"]["parameters"]["properties"] == {}  # bound: not shown
    assert "text" not in mock.requests[0].tools[0]["function"]["parameters"].get("required", [])
    assert state["completion"][1]["content"] == "bound"


@pytest.mark.parametrize(
    ("bindings", "message"),
    [
        ({"ech.text": "task.x"}, "binding 'ech.text': this toolset has no tool 'ech'"),
        ({"echo.txt": "task.x"}, "binding 'echo.txt': MCP tool 'echo' takes no argument 'txt'"),
    ],
)
async def test_mcp_bindings_are_checked_once_tools_are_listed(
    mock: MockModelServer, make_harness: Any, marker: str, bindings: dict[str, str], message: str
) -> None:
    state = await make_harness(toolsets=[vf.Toolset([server(marker)], bindings=bindings)]).run("x")
    assert state["error"]["type"] == "ConfigError" and message in state["error"]["message"]


async def test_a_server_per_rollout_and_none_left_after_each_wave_of_concurrent_rollouts(
    mock: MockModelServer, make_harness: Any, marker: str
) -> None:
    # Two waves of 8 concurrent rollouts: one server per rollout, none left after a wave, and the second wave
    # starts its own. Each server start imports the mcp SDK (about a CPU second): 48 rollouts cost half a minute
    # on 2 cores and checked nothing 16 do not.
    mock.responder = call_then_answer("pid")
    harness = make_harness(toolsets=[vf.Toolset([server(marker)], scope="rollout", show=["pid"])])
    states: list[vf.State] = []
    for _ in range(2):
        states += await asyncio.gather(*(harness.run("pid?") for _ in range(8)))
        assert processes_with(marker) == []
    assert all(s["error"] is None for s in states)
    pids = {s["completion"][1]["content"] for s in states}
    assert len(pids) == 16  # one server process per rollout


@pytest.mark.slow
async def test_global_server_serves_256_concurrent_rollouts(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    def responder(request: MockRequest) -> Reply:
        if request.last_message.get("role") == "tool":
            return Reply.text(str(request.last_message["content"]))
        n = int(request.last_user_text)
        return Reply.tool("add", {"a": n, "b": 1000}).and_tool("pid")

    mock.responder = responder
    harness = make_harness(toolsets=[vf.Toolset([server(marker)], scope="global")])
    states = await asyncio.gather(*(harness.run(str(n)) for n in range(256)))
    assert [s["completion"][1]["content"] for s in states] == [str(n + 1000) for n in range(256)]
    assert len({s["completion"][2]["content"] for s in states}) == 1  # one server for all
    assert len(processes_with(marker)) == 1
    await harness.teardown()


async def test_concurrent_calls_of_many_rollouts_are_in_flight_together(
    mock: MockModelServer, make_harness: Any, marker: str
) -> None:
    # Every call waits until all 64 are in flight at once: one queue serialising them would deadlock.
    mock.responder = call_then_answer("rendezvous", {"parties": 64})
    harness = make_harness(toolsets=[vf.Toolset([server(marker)], scope="global", show=["rendezvous"])])
    states = await asyncio.gather(*(harness.run("meet") for _ in range(64)))
    assert [s["completion"][1]["content"] for s in states] == ["met"] * 64
    await harness.teardown()


async def test_a_server_that_dies_at_start_names_what_it_printed(
    mock: MockModelServer, make_harness: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """`Connection closed` alone says nothing: the error carries the end of the server's stderr, which still reaches ours."""
    code = "import sys; print('ModuleNotFoundError: No module named mcp.server.fastmcp', file=sys.stderr); sys.exit(1)"
    harness = make_harness(toolsets=[vf.Toolset([vf.MCPTool(sys.executable, ["-c", code])], name="old")])
    (state,) = await harness.run_group([vf.Task({"prompt": "a"})])
    assert state["error"]["type"] == "ToolError" and "failed to start" in state["error"]["message"]
    assert "its stderr ends: ModuleNotFoundError: No module named mcp.server.fastmcp" in state["error"]["message"]
    assert "No module named mcp.server.fastmcp" in capfd.readouterr().err
    await harness.teardown()


async def test_a_server_that_fails_to_start_is_recorded_and_other_rollouts_finish(
    mock: MockModelServer, make_harness: Any, marker: str
) -> None:
    broken = vf.Toolset([vf.MCPTool(sys.executable, ["-c", "import sys; sys.exit(3)", marker])], name="broken")
    missing = vf.Toolset([vf.MCPTool("/no/such/mcp-server", [marker])], name="missing")
    harness = make_harness(toolsets=[broken, missing, vf.Toolset([server(marker)], name="good")])
    tasks = [
        vf.Task({"prompt": "a", "toolsets": {"show": ["broken"]}}),
        vf.Task({"prompt": "b", "toolsets": {"show": ["missing"]}}),
        vf.Task({"prompt": "c", "toolsets": {"show": ["good"]}}),
    ]
    first, second, third = await harness.run_group(tasks)
    assert first["error"]["type"] == "ToolError" and first["error"]["where"] == "tools"
    assert "failed to start" in first["error"]["message"] and "sys.exit(3)" in first["error"]["message"]
    assert second["error"]["type"] == "ToolError" and "/no/such/mcp-server" in second["error"]["message"]
    assert third["error"] is None and third["stop_condition"] == "no_tools_called"


async def test_a_server_that_dies_mid_rollout_gives_tool_errors(mock: MockModelServer, make_harness: Any, marker: str) -> None:
    def responder(request: MockRequest) -> Reply:
        tool_results = [m for m in request.messages if m["role"] == "tool"]
        if len(tool_results) == 2:
            return Reply.text("gave up")
        if not tool_results and request.last_user_text == "die":
            return Reply.tool("die")
        return Reply.tool("add", {"a": 1, "b": 1})

    mock.responder = responder
    harness = make_harness(toolsets=[vf.Toolset([server(marker)])])  # one server per rollout
    dying, healthy = await harness.run_group([vf.Task({"prompt": "die"}), vf.Task({"prompt": "live"})])
    assert dying["error"] is None and dying["completion"][-1]["content"] == "gave up"
    died, after = dying["completion"][1]["content"], dying["completion"][3]["content"]
    assert died.startswith("Error: ToolError: MCP tool 'die' of MCPTool(") and "failed" in died
    assert after.startswith("Error: ToolError: ")
    assert [m["content"] for m in healthy["completion"] if m["role"] == "tool"] == ["2", "2"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


@pytest.fixture
def http_server(marker: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, SERVER, "--http", str(port), "--marker", marker], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_until(lambda: _answers(url), "the MCP HTTP server to start", process=process)
        yield url
    finally:
        process.terminate()
        process.wait(HANG_S)


async def test_streamable_http_server_by_url(mock: MockModelServer, make_harness: Any, http_server: str) -> None:
    mock.responder = call_then_answer("add", {"a": 20, "b": 22})
    harness = make_harness(toolsets=[vf.Toolset([vf.MCPTool(url=http_server, headers={"X-Trace": "v1"})])])
    states = await asyncio.gather(*(harness.run("x") for _ in range(4)))
    assert [s["completion"][1]["content"] for s in states] == ["42"] * 4


def test_mcp_tool_config() -> None:
    toolset = vf.Toolset(config={"name": "remote", "tools": [{"command": "python", "args": ["server.py"], "env": {"A": "1"}}]})
    assert toolset.mcp_tools[0].config == vf.MCPToolConfig(command="python", args=["server.py"], env={"A": "1"})
    assert toolset.mcp_tools[0].name == "server"
    with pytest.raises(vf.ConfigError, match="exactly one of command"):
        vf.MCPTool()
    with pytest.raises(vf.ConfigError, match="exactly one of command"):
        vf.MCPToolConfig(command="x", url="http://y")
    with pytest.raises(vf.ConfigError, match="field 'bogus': unknown field"):
        vf.MCPToolConfig(command="x", bogus=1)
