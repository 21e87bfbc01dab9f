"""A finished rollout's JSON record (`state_to_output`): a plain, independent copy of the state's fields, exact
for every value a finalized state may hold, whichever way (orjson in C, or `thaw` in Python) it was copied."""

from __future__ import annotations

import enum
import json
import math
import random
from typing import Any

import pytest

import v1 as vf
from v1.env._env import OUTPUT_FIELDS, state_to_output
from v1.rollout import thaw
from v1.rollout._task import FrozenDict
from v1.testing import MockModelServer


class Colour(str, enum.Enum):
    RED = "red"


def reference_output(state: vf.State, task: vf.Task, index: int, attempts: int, columns: list[str]) -> dict[str, Any]:
    """What `state_to_output` made before orjson copied it: `thaw` of every field."""
    values = {**state, "answer": task.get("answer"), "info": task.get("info") or {}}
    values |= {"rollout_index": index, "attempts": attempts}
    output = {name: thaw(values.get(name)) for name in OUTPUT_FIELDS}
    return output | {column: thaw(state.get(column)) for column in columns}


def containers(value: Any) -> list[Any]:
    """Every dict and list inside `value`, itself included."""
    if isinstance(value, dict):
        return [value, *(inner for item in value.values() for inner in containers(item))]
    if isinstance(value, list):
        return [value, *(inner for item in value for inner in containers(item))]
    return []


def assert_same_json_values(got: Any, want: Any) -> None:
    """Equal, NaN included, with plain `dict`/`list` containers wherever `want` has a container."""
    if isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got)
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want), (got, want)
        for key in want:
            assert_same_json_values(got[key], want[key])
    elif isinstance(want, list):
        assert type(got) is list and len(got) == len(want), (got, want)
        for got_item, want_item in zip(got, want):
            assert_same_json_values(got_item, want_item)
    else:
        assert got == want and (type(got) is type(want) or isinstance(want, enum.Enum)), (got, want)


async def finished_state(mock: MockModelServer, odd: Any) -> vf.State:
    async def program(task: vf.Task, state: vf.State) -> None:
        state["completion"] = [{"role": "assistant", "content": "done"}]
        state["odd"] = odd

    harness = vf.Harness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", program=program)
    return await harness.run({"prompt": "hello", "answer": "olleh", "info": {"nested": {"list": [1, 2.5, "x"]}}})


async def test_the_output_is_a_plain_copy_that_shares_nothing_with_the_state(mock: MockModelServer) -> None:
    state = await finished_state(mock, {"plain": [1, {"a": None}]})
    assert isinstance(state.task["info"], FrozenDict)  # the task's fields are frozen: the output thaws them
    output = state_to_output(state, state.task, 3, 2, ["odd"])
    assert_same_json_values(dict(output), reference_output(state, state.task, 3, 2, ["odd"]))
    shared = {id(part) for part in containers(dict(state)) + containers(dict(state.task))}
    assert not [part for part in containers(dict(output)) if id(part) in shared]
    output["info"]["nested"]["list"].append("mine")  # a plain, mutable copy: the task is untouched
    assert state.task["info"]["nested"]["list"] == [1, 2.5, "x"]


ODD_VALUES = [math.nan, -math.inf, 2**70, -(2**64), 5e-324, Colour.RED, "\u00e9\U0001f600", [1, math.nan]]
"""Values a finalized state may hold that orjson writes differently from `json.dumps`, refuses, or that test its edges."""


@pytest.mark.parametrize("odd", ODD_VALUES, ids=repr)
async def test_values_orjson_would_change_are_copied_exactly(mock: MockModelServer, odd: Any) -> None:
    state = await finished_state(mock, {"odd": odd})
    output = state_to_output(state, state.task, 0, 1, ["odd"])
    want = reference_output(state, state.task, 0, 1, ["odd"])
    assert_same_json_values(dict(output), want)
    assert json.dumps(output) == json.dumps(want)


async def test_random_json_values_come_out_as_thaw_makes_them(mock: MockModelServer) -> None:
    rng = random.Random(7)

    def value(depth: int) -> Any:
        kind = rng.randrange(9 if depth < 4 else 6)
        leaves = [None, rng.random() * 10 ** rng.randint(-300, 300), rng.randint(-(2**62), 2**62), rng.choice([True, False])]
        if kind < 4:
            return leaves[kind]
        if kind == 4:
            return "".join(rng.choice('aé😀"\\\n') for _ in range(rng.randint(0, 5)))
        if kind == 5:
            return rng.choice([math.nan, math.inf, 2**65, -(2**80), 0.1])
        if kind in (6, 7):
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {f"k{index}": value(depth + 1) for index in range(rng.randint(0, 3))}

    for _ in range(20):
        odd = value(0)
        state = await finished_state(mock, odd)
        output = state_to_output(state, state.task, 0, 1, ["odd"])
        assert_same_json_values(dict(output), reference_output(state, state.task, 0, 1, ["odd"]))
