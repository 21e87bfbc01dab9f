"""`plan_units`: groups, early validation of every row, and a plan that holds ids rather than tasks."""

from __future__ import annotations

import gc

import pytest
from datasets import Dataset

import v1 as vf
from v1.env._scheduling import plan_units
from v1.rollout import Task


def to_task(row: object) -> Task:
    return row if isinstance(row, Task) else Task(row)  # type: ignore[arg-type]


def live_tasks() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, Task))


def test_a_plan_of_indexable_rows_holds_no_tasks_and_builds_them_when_asked() -> None:
    rows = [{"prompt": f"question {i}"} for i in range(5000)]
    before = live_tasks()
    plan = plan_units(rows, to_task, rollouts_per_example=2, independent_scoring=False)
    assert live_tasks() - before < 5, "the plan kept a task per row"
    assert len(plan.units) == 5000 and plan.example_order[:3] == [0, 1, 2]
    unit = plan.units[1234]
    assert unit.keys() == [(1234, 0), (1234, 1)]
    task = plan.task(unit)
    assert task["example_id"] == 1234 and task["prompt"][0]["content"] == "question 1234"


def test_a_bad_row_fails_the_plan_before_anything_runs() -> None:
    rows = [{"prompt": "fine"}, {"prompt": "fine"}, {"prompt": float("nan")}]
    with pytest.raises(vf.TaskError):
        plan_units(rows, to_task, rollouts_per_example=1, independent_scoring=False)


def test_repeated_rows_form_one_group_and_independent_scoring_splits_it() -> None:
    row = {"prompt": "same", "example_id": "e"}
    grouped = plan_units([row] * 3, to_task, rollouts_per_example=2, independent_scoring=False)
    assert list(grouped.units) == ["e"] and grouped.units["e"].indices == list(range(6))
    split = plan_units([row] * 3, to_task, rollouts_per_example=2, independent_scoring=True)
    assert sorted(split.units) == [("e", i) for i in range(6)]
    assert all(split.task(unit)["example_id"] == "e" for unit in split.units.values())


def test_a_generator_is_read_once_and_its_tasks_are_kept() -> None:
    consumed: list[int] = []

    def rows():  # type: ignore[no-untyped-def]
        for i in range(4):
            consumed.append(i)
            yield {"prompt": f"q{i}"}

    plan = plan_units(rows(), to_task, rollouts_per_example=1, independent_scoring=False)
    assert consumed == [0, 1, 2, 3]
    assert [plan.task(unit)["prompt"][0]["content"] for unit in plan.units.values()] == ["q0", "q1", "q2", "q3"]


def test_a_dataset_is_read_by_position() -> None:
    dataset = Dataset.from_list([{"prompt": f"d{i}", "example_id": f"x{i}"} for i in range(10)])
    plan = plan_units(dataset, to_task, rollouts_per_example=1, independent_scoring=False)
    assert plan.example_order == [f"x{i}" for i in range(10)]
    assert plan.task(plan.units["x7"])["prompt"][0]["content"] == "d7"
