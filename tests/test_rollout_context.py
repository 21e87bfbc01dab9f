"""`RolloutContext`: what a program gets from the harness, in a module of its own with explicit fields."""

from __future__ import annotations

import dataclasses
import typing

import v1 as vf
from tests.tools.patience import HANG_S
from v1.config import ArtifactConfig
from v1.rollout import Handlers, RolloutContext, UserSimulator
from v1.testing import MockModelServer

WRITE_FILES = "echo program > mine.txt; echo taskset > shared.txt; echo tools > tools.txt"


def test_a_program_gets_exactly_these_fields_and_no_harness() -> None:
    names = [field.name for field in dataclasses.fields(RolloutContext)]
    assert names == ["task", "state", "handlers", "user", "default_max_turns", "timeout_seconds", "artifacts"]
    hints = typing.get_type_hints(RolloutContext)
    assert hints["state"] is vf.State and hints["handlers"] is Handlers
    assert hints["user"] == UserSimulator | None and hints["artifacts"] == list[ArtifactConfig]


async def test_the_tasksets_and_toolsets_artifacts_reach_a_command_program(mock: MockModelServer) -> None:
    taskset = vf.Taskset(source=[{"prompt": "p"}], config={"artifacts": [{"path": "shared.txt"}]})
    toolset = vf.Toolset(config={"artifacts": [{"path": "tools.txt"}]})
    program = {"command": ["sh", "-c", WRITE_FILES], "artifacts": [{"path": "mine.txt"}]}
    client = vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    harness = vf.Harness(client=client, model="m", program=program, toolsets=[toolset], timeout_seconds=HANG_S)
    [state] = await vf.Env(taskset, harness).run_group([{"prompt": "p"}])
    assert state["error"] is None, state["error"]
    assert {name: text.strip() for name, text in state["artifacts"].items()} == {
        "mine.txt": "program",
        "shared.txt": "taskset",
        "tools.txt": "tools",
    }
