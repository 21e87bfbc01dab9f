"""`toolsets.bash` and `toolsets.files` act in the rollout's sandbox: the base loop calls them as the mock model says."""

from __future__ import annotations

from pathlib import Path

import pytest

import v1 as vf
from toolsets import bash_toolset, files_toolset
from toolsets.bash import clip
from v1.testing import MockModelServer, Reply


@pytest.fixture(autouse=True)
def private_sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("V1_SANDBOX_ROOT", str(tmp_path / "sandboxes"))


async def test_files_and_bash_work_in_the_workspace_and_refuse_to_leave_it() -> None:
    with MockModelServer() as mock:
        mock.script(
            Reply.tool("write_file", {"path": "src/app.txt", "content": "one two"}),
            Reply.tool("edit_file", {"path": "src/app.txt", "old": "two", "new": "three"}).and_tool(
                "edit_file", {"path": "src/app.txt", "old": "absent", "new": "x"}
            ),
            Reply.tool("read_file", {"path": "src/app.txt"})
            .and_tool("list_files", {"path": "src"})
            .and_tool("read_file", {"path": "../../etc/passwd"})
            .and_tool("bash", {"command": "wc -w < src/app.txt; pwd; exit 4"}),
            Reply.text("done"),
        )
        harness = vf.Harness(
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="m",
            sandbox={},
            toolsets=[files_toolset(), bash_toolset()],
            max_turns=6,
        )
        state = await harness.run("edit the file")
    assert state["error"] is None
    results = [m["content"] for m in state["completion"] if m["role"] == "tool"]
    assert results[0] == "wrote 7 bytes to src/app.txt"
    assert results[1] == "edited src/app.txt"
    assert "occurs 0 times" in results[2]
    assert results[3] == "one three"
    assert results[4] == "app.txt\n"
    assert "outside the sandbox workspace" in results[5] or "leaves the sandbox workspace" in results[5]
    assert results[6] == "[exit status 4]\n2\n/workspace\n"
    assert sorted(tool["name"] for tool in state["tool_defs"]) == ["bash", "edit_file", "list_files", "read_file", "write_file"]
    assert "sandbox" not in str(state["tool_defs"][0]["parameters"])


def test_bash_output_is_clipped_in_the_middle() -> None:
    text = "a" * 10 + "b" * 10
    assert clip(text, 10) == "aaaaa\n[... 10 characters cut ...]\nbbbbb"
    assert clip("short", 10) == "short"
