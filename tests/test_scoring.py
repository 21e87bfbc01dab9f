"""Scoring: rewards and metrics per rollout and per group, then advantages."""

from __future__ import annotations

import math

import pytest

import v1
from v1.rollout import Handler, Handlers, score_group, score_rollout


def make_task_and_state(answer: str = "4") -> tuple[v1.Task, v1.State]:
    task = v1.Task({"prompt": "What is 2+2?", "answer": answer}).freeze()
    return task, v1.State.for_task(task)


def collect(*entries: tuple) -> Handlers:
    """`(fn, kind)` or `(fn, kind, weight)` tuples -> `Handlers`."""
    built = []
    for fn, kind, *weight in entries:
        built.append(Handler.build(fn, kind, weight=weight[0] if weight else None))
    return Handlers.collect(built)


def add_steps(state: v1.State, count: int) -> None:
    state._set_managed("trajectory", [{"prompt": [], "completion": []} for _ in range(count)])


# -- per rollout -------------------------------------------------------------------------


def exact(answer, completion):
    return 1.0 if completion == answer else 0.0


def half(state):
    return 0.4


def length(completion):
    return len(completion)


async def test_reward_is_the_weighted_sum_and_metrics_are_recorded():
    task, state = make_task_and_state()
    state["completion"] = "4"
    await score_rollout(collect((exact, "reward"), (half, "reward", 0.5), (length, "metric")), task, state)
    assert state["metrics"] == {"exact": 1.0, "half": 0.4, "length": 1.0}
    assert state["reward"] == pytest.approx(1.0 + 0.5 * 0.4)
    assert state["error"] is None
    assert state["is_completed"] is False


async def test_weight_zero_reward_is_recorded_but_not_summed():
    def ignored(state):
        return 100.0

    task, state = make_task_and_state()
    state["completion"] = "4"
    await score_rollout(collect((exact, "reward"), (ignored, "reward", 0.0)), task, state)
    assert state["metrics"]["ignored"] == 100.0
    assert state["reward"] == 1.0


async def test_metrics_do_not_count_towards_the_reward():
    task, state = make_task_and_state()
    state["completion"] = "four"
    await score_rollout(collect((length, "metric")), task, state)
    assert state["metrics"] == {"length": 4.0}
    assert state["reward"] == 0.0


async def test_integer_results_become_floats():
    def whole(state):
        return 2

    task, state = make_task_and_state()
    await score_rollout(collect((whole, "reward")), task, state)
    assert state["metrics"]["whole"] == 2.0
    assert isinstance(state["metrics"]["whole"], float)
    assert state["reward"] == 2.0


async def test_async_rewards_are_awaited():
    async def async_score(state):
        return 0.75

    task, state = make_task_and_state()
    await score_rollout(collect((async_score, "reward")), task, state)
    assert state["reward"] == 0.75


async def test_existing_metrics_are_kept():
    task, state = make_task_and_state()
    state["metrics"] = {"earlier": 3.0}
    await score_rollout(collect((half, "reward")), task, state)
    assert state["metrics"] == {"earlier": 3.0, "half": 0.4}


async def test_a_raising_reward_scores_zero_and_records_the_error():
    def broken(state):
        raise ValueError("parser exploded")

    task, state = make_task_and_state()
    state["completion"] = "4"
    await score_rollout(collect((broken, "reward"), (exact, "reward")), task, state)
    assert state["metrics"] == {"broken": 0.0, "exact": 1.0}
    assert state["reward"] == 1.0
    assert state["error"] == {"type": "ValueError", "message": "parser exploded", "where": "reward:broken"}
    assert state["is_completed"] is True
    assert state["stop_condition"] == "has_error"


@pytest.mark.parametrize("value", ["yes", None, True, math.nan, math.inf, [1.0]])
async def test_a_non_numeric_result_is_recorded_as_an_error(value):
    def odd(state):
        return value

    task, state = make_task_and_state()
    await score_rollout(collect((odd, "reward")), task, state)
    assert state["metrics"] == {"odd": 0.0}
    assert state["reward"] == 0.0
    assert state["error"]["type"] == "TypeError"
    assert "reward 'odd' returned" in state["error"]["message"]
    assert "expected a finite number" in state["error"]["message"]
    assert state["error"]["where"] == "reward:odd"


async def test_a_raising_metric_is_recorded_with_its_kind():
    def bad_metric(state):
        raise RuntimeError("nope")

    task, state = make_task_and_state()
    await score_rollout(collect((bad_metric, "metric")), task, state)
    assert state["metrics"] == {"bad_metric": 0.0}
    assert state["error"]["where"] == "metric:bad_metric"


async def test_the_first_error_is_kept():
    def first(state):
        raise ValueError("first")

    def second(state):
        raise ValueError("second")

    task, state = make_task_and_state()
    await score_rollout(collect((first, "reward"), (second, "reward")), task, state)
    assert state["error"]["message"] == "first"


async def test_group_handlers_are_skipped_per_rollout():
    calls = []

    def group_reward(states):
        calls.append("group")
        return [1.0 for _ in states]

    task, state = make_task_and_state()
    await score_rollout(collect((group_reward, "reward")), task, state)
    assert calls == []
    assert state["metrics"] == {}
    assert state["reward"] == 0.0


# -- per group ---------------------------------------------------------------------------


def group_of(answers: list[str], completions: list[str]) -> tuple[list[v1.Task], list[v1.State]]:
    tasks, states = [], []
    for answer, completion in zip(answers, completions):
        task, state = make_task_and_state(answer)
        state["completion"] = completion
        tasks.append(task)
        states.append(state)
    return tasks, states


async def score_both(handlers: Handlers, tasks, states) -> None:
    for task, state in zip(tasks, states):
        await score_rollout(handlers, task, state)
    await score_group(handlers, tasks, states)


async def test_group_reward_gives_one_value_per_state():
    def rank(completions):
        return [float(len(c)) for c in completions]

    tasks, states = group_of(["4", "4", "4"], ["4", "44", "444"])
    await score_both(collect((exact, "reward"), (rank, "reward", 0.5)), tasks, states)
    assert [s["metrics"] for s in states] == [
        {"exact": 1.0, "rank": 1.0},
        {"exact": 0.0, "rank": 2.0},
        {"exact": 0.0, "rank": 3.0},
    ]
    assert [s["reward"] for s in states] == [1.5, 1.0, 1.5]


async def test_group_metric_is_recorded_but_not_summed():
    def group_size(states):
        return [len(states)] * len(states)

    tasks, states = group_of(["4", "4"], ["4", "5"])
    await score_both(collect((exact, "reward"), (group_size, "metric")), tasks, states)
    assert [s["metrics"]["group_size"] for s in states] == [2.0, 2.0]
    assert [s["reward"] for s in states] == [1.0, 0.0]


@pytest.mark.parametrize("result", [[1.0], [1.0, 2.0, 3.0], 1.0, None])
async def test_wrong_length_group_result_is_recorded_on_every_state(result):
    def wrong(states):
        return result

    tasks, states = group_of(["4", "4"], ["4", "5"])
    await score_group(collect((wrong, "reward")), tasks, states)
    for state in states:
        assert state["metrics"] == {"wrong": 0.0}
        assert state["reward"] == 0.0
        assert state["error"]["type"] == "TypeError"
        assert "group reward 'wrong' must return 2 values (one per state)" in state["error"]["message"]
        assert state["error"]["where"] == "reward:wrong"
        assert state["stop_condition"] == "has_error"


async def test_raising_group_reward_is_recorded_on_every_state():
    def broken(states):
        raise KeyError("missing")

    tasks, states = group_of(["4", "4"], ["4", "5"])
    await score_group(collect((broken, "reward")), tasks, states)
    assert [s["error"]["type"] for s in states] == ["KeyError", "KeyError"]
    assert [s["metrics"]["broken"] for s in states] == [0.0, 0.0]


async def test_default_advantage_is_reward_minus_group_mean():
    tasks, states = group_of(["4", "4", "4", "4"], ["4", "4", "x", "4"])
    await score_both(collect((exact, "reward")), tasks, states)
    assert [s["reward"] for s in states] == [1.0, 1.0, 0.0, 1.0]
    assert [s["advantage"] for s in states] == pytest.approx([0.25, 0.25, -0.75, 0.25])


async def test_default_advantage_treats_a_missing_reward_as_zero():
    tasks, states = group_of(["4", "4"], ["4", "x"])
    states[0]["reward"] = 2.0
    await score_group(Handlers.collect([]), tasks, states)
    assert [s["advantage"] for s in states] == [1.0, -1.0]


async def test_custom_advantage_is_used():
    @v1.advantage
    def relative(states):
        return [state["reward"] * 10 for state in states]

    tasks, states = group_of(["4", "4"], ["4", "x"])
    await score_both(collect((exact, "reward"), (relative, "advantage")), tasks, states)
    assert [s["advantage"] for s in states] == [10.0, 0.0]


async def test_highest_priority_advantage_wins():
    def low(states):
        return [1.0] * len(states)

    def high(states):
        return [2.0] * len(states)

    handlers = Handlers.collect([Handler.build(low, "advantage", priority=0), Handler.build(high, "advantage", priority=5)])
    tasks, states = group_of(["4"], ["4"])
    await score_group(handlers, tasks, states)
    assert states[0]["advantage"] == 2.0


async def test_bad_advantage_is_recorded_and_zeroed():
    def short(states):
        return [1.0]

    tasks, states = group_of(["4", "4"], ["4", "x"])
    await score_group(collect((short, "advantage")), tasks, states)
    assert [s["advantage"] for s in states] == [0.0, 0.0]
    assert all("advantage 'short' must return 2 values" in s["error"]["message"] for s in states)
    assert all(s["error"]["where"] == "advantage:short" for s in states)


async def test_trajectory_steps_get_reward_and_advantage():
    tasks, states = group_of(["4", "4"], ["4", "x"])
    add_steps(states[0], 2)
    add_steps(states[1], 3)
    await score_both(collect((exact, "reward")), tasks, states)
    assert [(step["reward"], step["advantage"]) for step in states[0]["trajectory"]] == [(1.0, 0.5), (1.0, 0.5)]
    assert [(step["reward"], step["advantage"]) for step in states[1]["trajectory"]] == [(0.0, -0.5)] * 3
