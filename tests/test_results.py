"""EvalSummary (incremental, order-independent aggregates) and ResultsWriter (the run folder)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.env._results import ExactSum, k_values, pass_all_at_k, pass_at_k


def output(example_id: int, index: int, reward: float, **extra: Any) -> dict[str, Any]:
    return {
        "example_id": example_id,
        "rollout_index": index,
        "reward": reward,
        "metrics": {"m": reward * 2},
        "error": None,
        "stop_condition": "final_response",
        "token_usage": {"input_tokens": 10.0, "output_tokens": 3.0},
        "timing": {"total": 0.5, "model": {"duration": 0.25}},
        "attempts": 1,
        **extra,
    }


def test_exact_sum_does_not_depend_on_order() -> None:
    values = [0.1, 1e16, 0.2, -1e16, 0.3] * 50
    sums = set()
    for seed in range(5):
        shuffled = list(values)
        random.Random(seed).shuffle(shuffled)
        total = ExactSum()
        for value in shuffled:
            total.add(value)
        sums.add(total.value)
    assert sums == {math.fsum(values)}


def test_exact_sum_cannot_overflow_and_takes_finite_numbers_only() -> None:
    huge = ExactSum()
    for value in (1e308, 1e308):
        huge.add(value)
    assert huge.mean(2) == 1e308 and huge.value == sys.float_info.max
    mixed = ExactSum()
    for value in (sys.float_info.max, sys.float_info.max, -sys.float_info.max, 5e-324, 3):
        mixed.add(value)
    assert mixed.value == sys.float_info.max and mixed.mean(5) == sys.float_info.max / 5
    assert ExactSum().mean(0) == 0.0
    for bad in (math.nan, math.inf, -math.inf, "1.0", 10**400, True, None):
        with pytest.raises(ValueError, match="is not a finite number"):
            ExactSum().add(bad)  # type: ignore[arg-type]


def test_pass_at_k_estimators() -> None:
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_all_at_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert k_values(3) == [1, 2, 3] and k_values(8) == [1, 2, 4, 8] and k_values(1) == [1]


def test_summary_aggregates() -> None:
    summary = vf.EvalSummary(pass_threshold=0.5)
    for index, reward in enumerate([1.0, 0.0]):
        summary.add(output(0, index, reward))
    summary.add(output(1, 0, 0.0, error={"type": "ModelError", "message": "x", "where": "model"}, attempts=3))
    summary.add(output(1, 1, 0.0, model_retries={"RateLimitError": 2, "InvalidModelResponseError": 1}))
    meta = summary.metadata()
    assert meta["num_model_retries"] == 3
    assert meta["model_retry_types"] == {"InvalidModelResponseError": 1, "RateLimitError": 2}
    assert meta["num_rollouts"] == 4
    assert meta["avg_reward"] == 0.25 and meta["avg_metrics"] == {"m": 0.5}
    assert meta["avg_error"] == 0.25 and meta["error_types"] == {"ModelError": 1}
    assert meta["num_retries"] == 2
    assert meta["pass_at_k"] == {"1": 0.25, "2": 0.5}  # example 0: 1/2 and 1; example 1: 0 and 0
    assert meta["pass_all_k"] == {"1": 0.25, "2": 0.0}
    assert meta["usage"] == {"input_tokens": 10.0, "output_tokens": 3.0}
    assert meta["total_usage"] == {"input_tokens": 40.0, "output_tokens": 12.0}
    assert meta["avg_timing"] == {"model": 0.25, "total": 0.5}


def test_summary_is_the_same_in_any_order() -> None:
    outputs = [output(e, i, random.Random(e * 7 + i).random()) for e in range(30) for i in range(3)]
    metadata = []
    for seed in range(3):
        random.Random(seed).shuffle(outputs)
        summary = vf.EvalSummary()
        for item in outputs:
            summary.add(item)
        metadata.append(json.dumps(summary.metadata(), sort_keys=True))
    assert len(set(metadata)) == 1


async def test_writer_appends_lines_and_replaces_metadata(tmp_path: Path) -> None:
    writer = vf.ResultsWriter(tmp_path / "run")
    await writer.write_metadata({"n": 0})
    await writer.write([output(0, 0, 1.0), output(0, 1, 0.0)])
    await writer.write_metadata({"n": 2})
    await writer.close()
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["rollout_index"] for line in lines] == [0, 1]
    assert json.loads((tmp_path / "run" / "metadata.json").read_text()) == {"n": 2}
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["metadata.json", "results.jsonl"]


def counting_trips(writer: vf.ResultsWriter) -> list[int]:
    """How many outputs each trip to the writer thread carried (the real `_append` still writes them)."""
    trips: list[int] = []
    append = writer._append

    def counted(outputs: Any) -> None:
        trips.append(len(outputs))
        append(outputs)

    writer._append = counted  # type: ignore[method-assign]
    return trips


async def test_writes_made_while_a_flush_runs_go_out_together_and_each_returns_once_its_lines_are_written(
    tmp_path: Path,
) -> None:
    writer = vf.ResultsWriter(tmp_path / "run")
    trips = counting_trips(writer)
    results = tmp_path / "run" / "results.jsonl"

    async def one(index: int) -> None:
        await writer.write([output(index, 0, 1.0), output(index, 1, 0.0)])
        written = {json.loads(line)["example_id"] for line in results.read_text().splitlines()}
        assert index in written  # in the file when its write returns

    await asyncio.gather(*(one(index) for index in range(200)))
    await writer.close()
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted((line["example_id"], line["rollout_index"]) for line in lines) == [(i, r) for i in range(200) for r in (0, 1)]
    assert sum(trips) == 400 and len(trips) <= 3, trips  # a write each used to be a trip each: 200


async def test_one_writer_at_a_time_still_writes_each_group_when_it_asks(tmp_path: Path) -> None:
    writer = vf.ResultsWriter(tmp_path / "run")
    trips = counting_trips(writer)
    for index in range(3):
        await writer.write([output(index, 0, 1.0)])
        assert len((tmp_path / "run" / "results.jsonl").read_text().splitlines()) == index + 1
    await writer.close()
    assert trips == [1, 1, 1]


async def test_a_failed_flush_reaches_every_writer_of_its_batch_and_the_next_batch_goes_out(tmp_path: Path) -> None:
    writer = vf.ResultsWriter(tmp_path / "run")
    append = writer._append
    failing = [True]

    def disk_full_once(outputs: Any) -> None:
        if failing[0] and len(outputs) > 1:  # the first group batch fails, as a full disk would
            failing[0] = False
            raise OSError(28, "No space left on device")
        append(outputs)

    writer._append = disk_full_once  # type: ignore[method-assign]
    first = asyncio.ensure_future(writer.write([output(0, 0, 1.0)]))
    await asyncio.sleep(0)
    batch = [asyncio.ensure_future(writer.write([output(index, 0, 1.0)])) for index in (1, 2)]
    outcomes = await asyncio.gather(first, *batch, return_exceptions=True)
    assert outcomes[0] is None
    assert all(isinstance(outcome, OSError) and outcome.errno == 28 for outcome in outcomes[1:])
    await writer.write([output(3, 0, 1.0)])
    await writer.close()
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["example_id"] for line in lines] == [0, 3]


async def test_a_writer_that_stops_waiting_leaves_its_lines_to_be_written(tmp_path: Path) -> None:
    writer = vf.ResultsWriter(tmp_path / "run")
    first = asyncio.ensure_future(writer.write([output(0, 0, 1.0)]))  # written at once, in its own task
    await asyncio.sleep(0)
    second = asyncio.ensure_future(writer.write([output(1, 0, 1.0)]))  # waits for the next flush
    await asyncio.sleep(0)
    first.cancel()
    second.cancel()
    for gone in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await gone
    await writer.close()
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["example_id"] for line in lines] == [0, 1]


def test_load_keeps_finished_groups_and_drops_the_rest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps(output(0, 0, 1.0)), json.dumps(output(0, 1, 0.0))]  # group 0: complete
    lines += [json.dumps(output(1, 0, 1.0))]  # group 1: one of two saved
    lines += [json.dumps(output(0, 1, 0.0))]  # a duplicate
    lines += [json.dumps(output(7, 0, 1.0))]  # not planned
    text = "\n".join(lines) + "\n" + json.dumps(output(2, 0, 1.0))[:40]  # a half-written last line
    (run / "results.jsonl").write_text(text)
    summary = vf.EvalSummary()
    planned = {0: [(0, 0), (0, 1)], 1: [(1, 0), (1, 1)], 2: [(2, 0), (2, 1)]}
    done = vf.ResultsWriter(run).load(planned, summary)
    assert done == {0}
    kept = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [(o["example_id"], o["rollout_index"]) for o in kept] == [(0, 0), (0, 1)]
    assert summary.count == 2 and summary.avg_reward == 0.5


def test_resuming_needs_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(vf.ConfigError, match=r"no metadata\.json there"):
        vf.ResultsWriter.resuming(tmp_path)


def exact_mean(values: list[float], count: int) -> float:
    return float(sum((Fraction(value) for value in values), Fraction(0)) / count) if count else 0.0


def test_summary_means_are_the_exact_means_of_every_table_of_random_outputs() -> None:
    rng = random.Random(11)
    summary = vf.EvalSummary()
    seen: dict[str, list[float]] = {}
    for index in range(300):
        metrics = {name: rng.uniform(-1e3, 1e3) for name in rng.sample(["a", "b.c", "d"], rng.randint(0, 3))}
        usage = {"input_tokens": float(rng.randint(0, 10**6)), "output_tokens": rng.random()}
        spans = {name: {"start": 1.0, "duration": rng.random()} for name in rng.sample(["setup", "model", "scoring"], 2)}
        timing = {"total": rng.random() * 10, "overhead": rng.random(), **spans}
        reward = rng.choice([None, rng.random(), 1])
        summary.add({"example_id": index % 7, "reward": reward, "metrics": metrics, "token_usage": usage, "timing": timing})
        seen.setdefault("reward", []).append(float(reward or 0.0))
        for table, values in (("metrics", metrics), ("usage", usage)):
            for name, value in values.items():
                seen.setdefault(f"{table}.{name}", []).append(value)
        for name in ("total", "overhead"):
            seen.setdefault(f"timing.{name}", []).append(timing[name])
        for name, span in spans.items():
            seen.setdefault(f"timing.{name}", []).append(span["duration"])
    assert summary.avg_reward == exact_mean(seen["reward"], 300)
    assert summary.avg_metrics == {
        name: exact_mean(seen[f"metrics.{name}"], len(seen[f"metrics.{name}"])) for name in ("a", "b.c", "d")
    }
    assert summary.usage == {name: exact_mean(seen[f"usage.{name}"], 300) for name in ("input_tokens", "output_tokens")}
    timed = ("model", "overhead", "scoring", "setup", "total")
    assert summary.avg_timing == {name: exact_mean(seen[f"timing.{name}"], 300) for name in timed}


def test_an_output_refused_for_its_last_number_adds_none_of_the_others() -> None:
    summary = vf.EvalSummary()
    summary.add(output(0, 0, 1.0))
    before = summary.metadata()
    refused = output(1, 0, 0.0, timing={"total": 0.5, "model": {"duration": "slow"}})
    with pytest.raises(ValueError, match=r"field 'timing\.model\.duration': 'slow' is not a finite number"):
        summary.add(refused)
    assert summary.metadata() == before
