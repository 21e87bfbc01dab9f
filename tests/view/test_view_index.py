"""`v1.view`: finding run folders, and `results.jsonl` indexed by offsets and read incrementally."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from v1.env import EvalSummary
from v1.view._runs import RolloutIndex, RunFolderError, find_runs, histogram, read_json_object, summarize_rollout


def output(example: int, index: int, reward: float, **extra: Any) -> dict[str, Any]:
    return {
        "example_id": example,
        "rollout_index": index,
        "prompt": [{"role": "user", "content": f"question {example}"}],
        "completion": [{"role": "assistant", "content": f"answer {example}.{index}"}],
        "reward": reward,
        "metrics": {"exact": reward},
        "stop_condition": "no_tools_called",
        "error": None,
        "trajectory": [],
        **extra,
    }


def lines(*outputs: dict[str, Any]) -> str:
    return "".join(json.dumps(o) + "\n" for o in outputs)


def test_refresh_reads_only_what_was_appended_and_waits_for_a_line_to_end(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    index = RolloutIndex(path)
    assert index.refresh() is False and index.rows == []
    first = lines(output(0, 0, 1.0), output(0, 1, 0.0))
    later = json.dumps(output(1, 0, 0.5)) + "\n"
    path.write_text(first + later[:20])
    assert index.refresh() is True
    assert [row["n"] for row in index.rows] == [0, 1] and index.state.partial_bytes == 20
    with path.open("a") as results:
        results.write(later[20:])
    assert index.refresh() is True
    assert [(row["example_id"], row["rollout_index"], row["reward"]) for row in index.rows] == [
        (0, 0, 1.0),
        (0, 1, 0.0),
        (1, 0, 0.5),
    ]
    assert index.state.partial_bytes == 0
    assert index.refresh() is False
    assert index.read(2) == output(1, 0, 0.5)
    with pytest.raises(IndexError):
        index.read(3)


def test_the_summary_matches_eval_summary_over_the_same_outputs(tmp_path: Path) -> None:
    outputs = [
        output(e, i, (e + i) % 3 / 3, token_usage={"input_tokens": 10.0 + e, "output_tokens": 0.1 * i}, attempts=1 + (e == 2))
        for e in range(5)
        for i in range(3)
    ]
    outputs[0]["timing"] = {"total": 1.25, "overhead": 0.1, "model": {"duration": 0.7}, "setup": {"duration": 0.01}}
    outputs[4]["error"] = {"type": "ToolError", "message": "boom"}
    path = tmp_path / "results.jsonl"
    path.write_text(lines(*outputs))
    index = RolloutIndex(path)
    index.refresh()
    expected = EvalSummary()
    for o in outputs:
        expected.add(o)
    summary = index.summary()
    assert summary == {name: value for name, value in expected.metadata().items() if name in summary}
    assert set(expected.metadata()) - set(summary) == {"num_model_retries", "model_retry_types"}
    assert index.rows[4]["error"] == "ToolError" and index.rows[4]["error_message"] == "boom"


def test_a_replaced_or_cut_file_is_indexed_again(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(lines(output(0, 0, 1.0), output(0, 1, 1.0), output(1, 0, 1.0)))
    index = RolloutIndex(path)
    index.refresh()
    replacement = tmp_path / "results.jsonl.tmp"
    replacement.write_text(lines(output(7, 0, 0.0)))
    os.replace(replacement, path)  # what `v1 eval --resume` does
    assert index.refresh() is True
    assert [row["example_id"] for row in index.rows] == [7] and index.summary()["num_rollouts"] == 1


def test_unreadable_lines_are_counted_by_line_number_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(lines(output(0, 0, 1.0)) + "{oops\n" + "\n" + "[1, 2]\n" + lines(output(1, 0, 0.0)))
    index = RolloutIndex(path)
    index.refresh()
    assert [row["example_id"] for row in index.rows] == [0, 1]
    assert index.state.bad_lines == [2, 4]


def test_a_time_budget_reads_a_large_file_over_several_calls(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(lines(*(output(e, 0, 1.0, info={"padding": "x" * 5000}) for e in range(600))))  # 3 MB: 3 chunks
    index = RolloutIndex(path)
    index.refresh(time_budget=0.0)
    assert 0 < len(index.rows) < 600 and index.state.pending and index.state.partial_bytes == 0
    while index.state.pending:
        index.refresh(time_budget=0.0)
    assert [row["example_id"] for row in index.rows] == list(range(600))
    assert index.read(599)["example_id"] == 599
    assert index.read(1)["example_id"] == 1


def test_search_finds_text_anywhere_in_the_line_even_escaped_in_json(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(lines(output(0, 0, 1.0, answer='say "hi"'), output(1, 0, 1.0, answer="Ünïcode"), output(2, 0, 0.0)))
    index = RolloutIndex(path)
    index.refresh()
    assert index.search('SAY "HI"') == {0}
    assert index.search("ünïcode") == {1}
    assert index.search("question") == {0, 1, 2}
    assert index.search("nowhere") == set()


def test_summary_rows_survive_odd_outputs() -> None:
    row = summarize_rollout(3, {"prompt": "plain text", "completion": "done", "reward": float("nan"), "error": "a string"})
    assert (row["n"], row["reward"], row["error"], row["answer"], row["turns"]) == (3, None, "error", "done", 0)
    long = summarize_rollout(0, output(0, 0, 1.0, completion=[{"role": "assistant", "content": "x " * 500}]))
    assert len(long["answer"]) == 160 and long["answer"].endswith("…")


def test_find_runs_finds_eval_and_training_folders_but_not_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "evals" / "a").mkdir(parents=True)
    (tmp_path / "evals" / "a" / "results.jsonl").write_text("")
    (tmp_path / "train" / "t" / "checkpoints" / "step_1").mkdir(parents=True)
    (tmp_path / "train" / "t" / "metrics.jsonl").write_text("")
    (tmp_path / "train" / "t" / "checkpoints" / "step_1" / "summary.json").write_text("{}")
    (tmp_path / ".hidden" / "b").mkdir(parents=True)
    (tmp_path / ".hidden" / "b" / "metadata.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    assert find_runs(tmp_path) == [tmp_path / "evals" / "a", tmp_path / "train" / "t"]
    assert find_runs(tmp_path / "evals" / "a") == [tmp_path / "evals" / "a"]
    assert find_runs(tmp_path / "empty") == []


def test_read_json_object_says_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    assert read_json_object(path) is None
    path.write_text('{"model": ')
    with pytest.raises(RunFolderError, match=r"^metadata.json: not valid JSON"):
        read_json_object(path)
    path.write_text("[1]")
    with pytest.raises(RunFolderError, match="expected a JSON object, got list"):
        read_json_object(path)


def test_histogram_bins() -> None:
    assert histogram([]) == {"min": None, "max": None, "counts": []}
    assert histogram([1.0, 1.0]) == {"min": 1.0, "max": 1.0, "counts": [2]}
    assert histogram([0.0, 1.0, 1.0]) == {"min": 0.0, "max": 1.0, "counts": [1, 2]}
    spread = histogram([i / 99 for i in range(100)], bins=10)
    assert spread["counts"] == [10] * 10
