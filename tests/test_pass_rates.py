"""`PassRates` keeps pass@k up to date one rollout at a time: it must equal the mean over examples computed afresh."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from v1.env import EvalSummary, PassRates, k_values, pass_all_at_k, pass_at_k


def afresh(counts: dict[str, list[int]], estimate: Callable[[int, int, int], float]) -> dict[str, float]:
    """The means over examples with at least k rollouts, from every example's estimate (the summary's way before)."""
    largest = max((n for n, _ in counts.values()), default=0)
    result = {}
    for k in k_values(largest):
        values = [estimate(n, c, k) for n, c in counts.values() if n >= k]
        result[str(k)] = math.fsum(values) / len(values)
    return result


@pytest.mark.parametrize("seed", range(6))
def test_the_rates_after_every_rollout_equal_the_means_computed_afresh(seed: int) -> None:
    draw = random.Random(seed)
    examples = [f"e{i}" for i in range(draw.randint(1, 12))]
    rollouts = [draw.choice(examples) for _ in range(draw.randint(1, 120))]  # uneven: n need not be a power of two
    rates = PassRates()
    counts: dict[str, list[int]] = {}
    for example in rollouts:
        passed = draw.random() < 0.4
        rates.add(example, passed)
        entry = counts.setdefault(example, [0, 0])
        entry[0] += 1
        entry[1] += passed
        assert rates.pass_at_k() == afresh(counts, pass_at_k)
        assert rates.pass_all_k() == afresh(counts, pass_all_at_k)


def test_no_rollouts_give_no_rates_and_one_gives_k_1() -> None:
    rates = PassRates()
    assert rates.pass_at_k() == {} and rates.pass_all_k() == {}
    rates.add('"a"', True)
    assert rates.pass_at_k() == {"1": 1.0} and rates.pass_all_k() == {"1": 1.0}


def test_the_order_rollouts_finish_in_does_not_change_a_bit() -> None:
    draw = random.Random(7)
    rollouts = [(f"e{draw.randrange(30)}", draw.random() < 0.3) for _ in range(400)]
    first, second = EvalSummary(), EvalSummary()
    for example, passed in rollouts:
        first.add({"example_id": example, "reward": float(passed)})
    for example, passed in draw.sample(rollouts, len(rollouts)):
        second.add({"example_id": example, "reward": float(passed)})
    assert first.pass_at_k == second.pass_at_k and first.pass_all_k == second.pass_all_k
    assert set(first.pass_at_k) == {str(k) for k in k_values(max(n for n, _ in _counts(rollouts).values()))}


def _counts(rollouts: list[tuple[str, bool]]) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}
    for example, passed in rollouts:
        entry = counts.setdefault(example, [0, 0])
        entry[0] += 1
        entry[1] += passed
    return counts
