"""Stream tasksets: generator sources drawn on demand, `head`/`shuffle`/`view`, infinite sources, content keys,
and `Env.evaluate`/`generate` drawing rows as the run takes them (against the mock model server over real HTTP)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import v1 as vf
from v1.env import ResultsWriter
from v1.taskset import content_key
from v1.testing import MockModelServer, MockRequest, Reply


class Counted:
    """A generator function of `question` rows that counts the rows drawn and raises past `limit`."""

    def __init__(self, limit: int | None = None, fail_at: int | None = None) -> None:
        self.limit = limit
        self.fail_at = fail_at
        self.drawn = 0

    def __call__(self) -> Iterator[dict[str, Any]]:
        for index in itertools.count():
            if self.fail_at is not None and index == self.fail_at:
                raise ValueError(f"generator broke at row {index}")
            if self.limit is not None and self.drawn >= self.limit:
                raise AssertionError(f"drew more than {self.limit} rows: something materialised the stream")
            self.drawn += 1
            yield {"question": f"q{index}", "answer": f"q{index}"[::-1]}


def reverser(request: MockRequest) -> Reply:
    return Reply.text(request.last_user_text[::-1])


@vf.reward
def reversed_exactly(completion: list[dict[str, Any]], answer: str) -> float:
    return float(completion[-1]["content"] == answer)


# -- the taskset ----------------------------------------------------------------------------------


def test_a_list_source_keeps_positions_as_ids_and_is_listed_once() -> None:
    taskset = vf.Taskset(source=[{"question": "a"}, {"question": "b", "example_id": "mine"}])
    assert [row["example_id"] for row in taskset.rows()] == [0, "mine"]
    assert taskset.rows() is taskset.rows()
    assert taskset.row_source().listed() is not None


def test_a_generator_source_is_a_stream_keyed_by_content() -> None:
    source = Counted()
    taskset = vf.Taskset(source=source)
    assert taskset.row_source().listed() is None and source.drawn == 0
    first = list(itertools.islice(taskset.iter_rows(), 3))
    assert source.drawn == 3
    assert first[0]["example_id"] == content_key({"question": "q0", "answer": "0q"})
    assert first[0]["prompt"] == [{"role": "user", "content": "q0"}]
    again = list(itertools.islice(taskset.iter_rows(), 3))
    assert [row["example_id"] for row in again] == [row["example_id"] for row in first]


def test_a_row_id_overrides_the_content_key() -> None:
    taskset = vf.Taskset(source=lambda: iter([{"question": "a", "example_id": "own"}]))
    assert [row["example_id"] for row in taskset.iter_rows()] == ["own"]
    keyed = vf.Taskset(source=Counted()).view(lambda row: {**row, "example_id": row["question"]})
    assert [row["example_id"] for row in itertools.islice(keyed.iter_rows(), 2)] == ["q0", "q1"]


def test_head_shuffle_and_view_compose_lazily_into_new_tasksets() -> None:
    source = Counted(limit=40)
    base = vf.Taskset(source=source, infinite=True)
    composed = base.shuffle(7, buffer=8).view(lambda row: {**row, "answer": row["answer"].upper()}).head(5)
    assert source.drawn == 0
    rows = composed.rows()
    assert len(rows) == 5 and all(row["answer"].endswith("Q") for row in rows)
    assert source.drawn <= 5 + 8 + 1
    assert composed.rows() == rows  # the same seed, the same order
    assert base.row_source().infinite and not composed.row_source().infinite
    with pytest.raises(vf.ConfigError, match="infinite"):
        base.rows()
    assert type(composed) is vf.Taskset and composed.taskset_id == base.taskset_id


def test_composition_keeps_a_list_a_list_and_the_taskset_subclass() -> None:
    class Mine(vf.Taskset):
        pass

    taskset = Mine(source=[{"question": str(i)} for i in range(10)])
    shuffled = taskset.shuffle(3)
    assert isinstance(shuffled, Mine)
    assert sorted(row["example_id"] for row in shuffled.rows()) == list(range(10))
    assert [row["example_id"] for row in shuffled.rows()] != list(range(10))
    assert [row["example_id"] for row in taskset.head(3).rows()] == [0, 1, 2]
    assert taskset.rows() == [
        {"question": str(i), "prompt": [{"role": "user", "content": str(i)}], "example_id": i} for i in range(10)
    ]


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "3"])
def test_head_refuses_what_is_not_a_positive_integer(n: Any) -> None:
    with pytest.raises(vf.ConfigError, match=r"head\(n\): expected a positive integer"):
        vf.Taskset(source=Counted()).head(n)


def test_shuffle_of_an_infinite_taskset_needs_a_buffer_in_one_line() -> None:
    with pytest.raises(vf.ConfigError) as caught:
        vf.Taskset(source=Counted(), infinite=True).shuffle(1)
    assert "\n" not in str(caught.value) and "buffer=N" in str(caught.value)
    with pytest.raises(vf.ConfigError, match="positive integer"):
        vf.Taskset(source=Counted(), infinite=True).shuffle(1, buffer=0)


def test_a_question_changed_by_a_view_becomes_the_prompt() -> None:
    viewed = vf.Taskset(source=Counted()).view(lambda row: {**row, "question": row["question"].upper()}).head(1)
    assert viewed.rows()[0]["prompt"] == [{"role": "user", "content": "Q0"}]
    listed = vf.Taskset(source=[{"question": "a"}]).view(lambda row: {**row, "question": "b"})
    assert listed.tasks()[0]["prompt"] == [{"role": "user", "content": "b"}]


def test_a_view_that_returns_no_row_and_a_bad_row_name_the_row() -> None:
    with pytest.raises(vf.TaskError, match="source row 0: view returned int"):
        list(vf.Taskset(source=Counted()).view(lambda row: 3).head(2).iter_rows())
    with pytest.raises(vf.TaskError, match="source row 1: expected a mapping"):
        list(vf.Taskset(source=lambda: iter([{"question": "a"}, "b"])).iter_rows())


def test_a_generator_object_is_drawn_once() -> None:
    taskset = vf.Taskset(source=({"question": str(i)} for i in range(3)))
    assert len(list(taskset.iter_rows())) == 3
    with pytest.raises(vf.TaskError, match="drawn only once"):
        list(taskset.iter_rows())


def test_infinite_is_a_config_field() -> None:
    config = vf.TasksetConfig(source="tests.test_taskset_streams:Counted", infinite=True)
    assert vf.Taskset(config=config).row_source().infinite
    with pytest.raises(vf.ConfigError, match="infinite"):
        vf.TasksetConfig(infinite="sometimes")


# -- eval draws on demand --------------------------------------------------------------------------


def make_env(source: Any, **taskset: Any) -> vf.Env:
    return vf.Env(vf.Taskset(source=source, taskset_id="stream", rewards=[reversed_exactly], **taskset))


async def test_evaluate_of_an_infinite_generator_draws_only_what_it_runs(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    source = Counted(limit=50 + 4 + 1)  # the rows run, the rows in flight, one drawn ahead
    env = make_env(source, infinite=True)
    result = await env.evaluate(
        client_config, "m", num_examples=50, max_concurrent=4, results=ResultsWriter(tmp_path), keep_outputs=False
    )
    assert result["metadata"]["num_rollouts"] == 50 and result["metadata"]["num_examples"] == 50
    assert result["metadata"]["avg_reward"] == 1.0
    assert source.drawn == 50
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len({line["example_id"] for line in lines}) == 50


async def test_evaluate_of_an_infinite_taskset_needs_num_examples(client_config: vf.ClientConfig) -> None:
    source = Counted(limit=5)
    env = make_env(source, infinite=True)
    with pytest.raises(vf.ConfigError, match=r"source is infinite: pass num_examples \(v1 eval: -n N\)"):
        await env.evaluate(client_config, "m")
    assert source.drawn == 0
    with pytest.raises(vf.ConfigError, match="buffer"):
        env.eval_rows(5, seed=1)
    assert len(env.eval_rows(5)) == 5


async def test_a_generator_that_raises_mid_stream_keeps_the_rollouts_before_it(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    env = make_env(Counted(fail_at=6))
    with pytest.raises(vf.TaskError, match="source row 6: drawing it raised ValueError: generator broke at row 6"):
        await env.evaluate(client_config, "m", num_examples=20, max_concurrent=2, results=ResultsWriter(tmp_path))
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(line["prompt"][-1]["content"] for line in lines) == [f"q{i}" for i in range(6)]
    assert json.loads((tmp_path / "metadata.json").read_text())["num_rollouts"] == 6


async def test_a_resumed_stream_runs_only_the_rows_not_saved(
    mock: MockModelServer, client_config: vf.ClientConfig, tmp_path: Path
) -> None:
    mock.responder = reverser
    first = await make_env(Counted()).evaluate(client_config, "m", num_examples=4, results=ResultsWriter(tmp_path))
    calls = len(mock.requests)
    resumed = await make_env(Counted()).evaluate(
        client_config, "m", num_examples=7, rollouts_per_example=1, results=ResultsWriter(tmp_path)
    )
    assert first["metadata"]["num_rollouts"] == 4 and resumed["metadata"]["num_rollouts"] == 7
    assert len(mock.requests) - calls == 3
    assert resumed["metadata"]["num_examples"] == 7


async def test_repeated_rows_of_a_stream_get_distinct_ids(mock: MockModelServer, client_config: vf.ClientConfig) -> None:
    mock.responder = reverser
    env = make_env(lambda: iter([{"question": "same", "answer": "emas"}] * 3))
    result = await env.evaluate(client_config, "m", num_examples=-1)
    key = content_key({"question": "same", "answer": "emas"})
    assert [output["example_id"] for output in result["outputs"]] == [key, f"{key}-2", f"{key}-3"]


# -- training draws in order ---------------------------------------------------------------------


def test_training_order_draws_a_stream_as_positions_are_asked_for_and_holds_only_pending_rows() -> None:
    from v1.train._orchestrator import StreamOrder

    source = Counted(limit=8)
    order = StreamOrder(vf.Taskset(source=source, infinite=True).row_source(), pending=[1, 3])
    assert source.drawn == 0
    assert order.row_at(1)["question"] == "q1" and source.drawn == 2
    assert order.row_at(3)["question"] == "q3" and order.held == {}
    assert [order.row_at(position)["question"] for position in (5, 6)] == ["q5", "q6"]
    assert source.drawn == 7 and order.held == {}


def test_training_order_draws_a_finite_stream_again_when_it_ends_and_refuses_an_empty_one() -> None:
    from v1.train._orchestrator import StreamOrder

    order = StreamOrder(vf.Taskset(source=lambda: iter([{"question": "a"}, {"question": "b"}])).row_source())
    assert [order.row_at(position)["question"] for position in range(5)] == ["a", "b", "a", "b", "a"]
    with pytest.raises(vf.Error, match=r"the training rows \(source\) are an empty stream"):
        StreamOrder(vf.Taskset(source=lambda: iter([])).row_source()).row_at(0)
