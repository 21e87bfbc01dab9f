"""`token_usage`: the totals of a rollout's recorded usage, exact and finite whatever an upstream reports."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest

import v1
from v1._util.exact_sum import ExactSum, finite_number
from v1.harness._harness import token_usage


def exact_reference(inputs: list[Any], outputs: list[Any]) -> dict[str, float]:
    """Every count as a finite float (anything else as 0), summed exactly and rounded once."""

    def total(values: list[float]) -> float:
        exact = ExactSum()
        for value in values:
            exact.add(value)
        return exact.value

    ins = [finite_number(count) or 0.0 for count in inputs]
    outs = [finite_number(count) or 0.0 for count in outputs]
    final_output = total(outs)
    return {
        "input_tokens": total(ins),
        "output_tokens": final_output,
        "final_input_tokens": max(0.0, total([ins[-1], outs[-1], -final_output])),
        "final_output_tokens": final_output,
    }


def state_with(inputs: list[Any], outputs: list[Any]) -> v1.State:
    state = v1.State()
    steps = [{"response": {"usage": {"prompt_tokens": i, "completion_tokens": o}}} for i, o in zip(inputs, outputs)]
    state._set_managed("trajectory", [{"response": None}, *steps, {"response": {"usage": None}}])
    return state


ABSURD = [0, 1, 7, -3, 2**53, 2**53 + 1, -(2**53) - 1, 2**63, 10**400, -(10**400), 1e308, -1e308, 2.5, -0.0, 1e-300,
          float("nan"), float("inf"), True, False, None, "12", sys.float_info.max]  # fmt: skip


@pytest.mark.parametrize("seed", range(300))
def test_totals_equal_the_exact_sum_to_the_bit(seed: int) -> None:
    pick = random.Random(seed)
    turns = pick.randrange(1, 6)

    def count() -> Any:
        roll = pick.random()
        if roll < 0.4:
            return pick.randrange(0, 5000)
        if roll < 0.6:
            return pick.randrange(2**52, 2**54)  # near where integers stop being exact floats
        return pick.choice(ABSURD)

    inputs, outputs = [count() for _ in range(turns)], [count() for _ in range(turns)]
    got = token_usage(state_with(inputs, outputs))
    assert repr(got) == repr(exact_reference(inputs, outputs)), (inputs, outputs)


def test_small_counts_add_up() -> None:
    usage = token_usage(state_with([10, 25], [5, 7]))
    assert usage == {"input_tokens": 35.0, "output_tokens": 12.0, "final_input_tokens": 20.0, "final_output_tokens": 12.0}
    assert all(type(value) is float for value in usage.values())


def test_absurd_counts_stay_finite() -> None:
    usage = token_usage(state_with([1e308, 1e308, 10**400], [10**400, 1e308, 1e308]))
    assert usage["input_tokens"] == sys.float_info.max and usage["output_tokens"] == sys.float_info.max


def test_a_rollout_without_usage_has_none() -> None:
    assert token_usage(v1.State()) == {}


def test_entries_a_program_appended_in_a_form_of_its_own_are_passed_over() -> None:
    state = state_with([10, 25], [5, 7])
    trajectory = state["trajectory"]
    odd = ["a note", ["a", "list"], {"response": "text"}, {"response": {"usage": "many"}}, {"response": {"usage": {}}}]
    state._set_managed("trajectory", [*trajectory[:2], *odd, *trajectory[2:]])
    assert token_usage(state) == token_usage(state_with([10, 25], [5, 7]))
    partial = v1.State()
    partial._set_managed("trajectory", [{"response": {"usage": {"prompt_tokens": 4}}}])
    assert token_usage(partial)["input_tokens"] == 4.0 and token_usage(partial)["output_tokens"] == 0.0
