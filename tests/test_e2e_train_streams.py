"""The tiny recipe on an infinite generator taskset, for real: training and held-out eval draw rows as groups start.

The generators record every row they yield and raise when drawn past a limit, so a trainer that listed
the stream (`get_dataset`, `len()`) fails the run instead of passing quietly.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.test_e2e_train import few_steps
from v1.train import train

LIMIT = 200

MODULE = f"""
import itertools
import random

DRAWN = {{"train": 0, "eval": 0}}


def _rows(split, seed):
    letters = random.Random(seed)
    for index in itertools.count():
        if index == {LIMIT}:
            raise AssertionError("drew {LIMIT} rows: something listed the stream")
        DRAWN[split] += 1
        text = "".join(letters.choice("abcdefgh") for _ in range(3))
        yield {{"question": text, "answer": text[0]}}


def rows():
    return _rows("train", 0)


def held_out():
    return _rows("eval", 1)
"""


async def test_an_infinite_generator_taskset_trains_three_steps_drawing_rows_on_demand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stream_first_letter.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    import stream_first_letter  # type: ignore[import-not-found]

    config = few_steps(tmp_path / "run", None, 3)
    taskset = {"source": "stream_first_letter:rows", "eval_source": "stream_first_letter:held_out", "infinite": True}
    config = config.model_copy(
        update={
            "env": config.env.model_copy(update={"taskset": taskset}),
            # the random model at chance: groups without reward variance are trained on too, so each step runs
            "rollouts": config.rollouts.model_copy(update={"filter_zero_variance": False}),
            "sft": config.sft.model_copy(update={"warmup": False}),
        }
    )
    result = await train(config)
    assert result.steps == 3 and result.eval_before is not None and result.eval_after is not None
    drawn = stream_first_letter.DRAWN
    # 3 steps of 2 groups, and at most max_staleness (1) step of groups started ahead
    assert 6 <= drawn["train"] <= 6 + 2 * (config.rollouts.max_staleness + 1)
    assert drawn["eval"] == 2 * config.eval.num_examples  # before and after RL, 4 rows each
