"""`generate` starts each group through the taskset's `init_group` (the seed's Taskset hook)."""

from __future__ import annotations

from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer, Reply


class Assigned(vf.Taskset):
    async def init_group(self, task: vf.Task, num_rollouts: int) -> tuple[list[vf.Task], list[vf.State]]:
        tasks = [vf.Task({**dict(task), "assigned": f"c{index}"}).freeze() for index in range(num_rollouts)]
        return tasks, [vf.State.for_task(t) for t in tasks]


async def echo_assigned(task: vf.Task, state: vf.State) -> None:
    state["completion"] = [{"role": "assistant", "content": task["assigned"]}]


@pytest.fixture
def client() -> Any:
    mock = MockModelServer(lambda request: Reply.text("unused")).start()
    yield vf.ClientConfig(api_base_url=mock.url, max_retries=0)
    mock.stop()


def test_each_rollout_of_a_group_gets_the_task_init_group_gave_it(client: Any) -> None:
    env = vf.Env(Assigned(source=[{"prompt": "q", "answer": "a"}]), vf.Harness(program=echo_assigned))
    outputs = env.generate_sync(env.get_dataset(), client, "m", rollouts_per_example=3)["outputs"]
    assert [o["completion"][-1]["content"] for o in outputs] == ["c0", "c1", "c2"]
    assert all(o.get("error") is None for o in outputs)


def test_init_group_returning_the_wrong_count_is_one_clear_error(client: Any) -> None:
    class Short(vf.Taskset):
        async def init_group(self, task: vf.Task, num_rollouts: int) -> tuple[list[vf.Task], list[vf.State]]:
            return [task], [vf.State.for_task(task)]

    env = vf.Env(Short(source=[{"prompt": "q"}]), vf.Harness(program=echo_assigned))
    with pytest.raises(vf.TaskError, match=r"Short.init_group returned 1 tasks and 1 states for 2 rollouts"):
        env.generate_sync(env.get_dataset(), client, "m", rollouts_per_example=2)
