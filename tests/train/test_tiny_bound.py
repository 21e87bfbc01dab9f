"""The tiny model's parameter bound: it counts the vocabulary a config asks for, and only code can pass it."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from v1.config import TinyModelConfig
from v1.config._tiny_model import MAX_TINY_PARAMETERS
from v1.errors import ConfigError
from v1.train import TrainConfig

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_vs_trl.py"


def test_a_huge_vocabulary_is_not_tiny() -> None:
    hostile = {"vocab_size": 10**9, "hidden_size": 64}  # a billion filler tokens: 64 billion embedding weights
    with pytest.raises(ConfigError, match="is not tiny"):
        TrainConfig(env={"id": "tasksets.first_letter"}, model={"tiny": hostile})
    with pytest.raises(ConfigError, match="is not tiny"):
        TinyModelConfig(hostile)


def test_the_benchmarks_qwen_shape_passes_only_by_code() -> None:
    shapes = runpy.run_path(str(SCRIPT))
    qwen = shapes["SHAPES"]["qwen2.5-0.5b"]
    built = shapes["shape_model"](qwen)
    assert isinstance(built, TinyModelConfig)
    assert built.parameter_count() > MAX_TINY_PARAMETERS
    assert built.vocab_size == 151_936
    with pytest.raises(ConfigError, match="is not tiny"):
        TinyModelConfig(qwen.tiny)
    with pytest.raises(ConfigError, match="is not tiny"):
        TrainConfig(env={"id": "tasksets.first_letter"}, model={"tiny": qwen.tiny})


def test_the_shape_model_keeps_every_field_bound() -> None:
    shape = runpy.run_path(str(SCRIPT))["SHAPES"]["qwen2.5-0.5b"]
    with pytest.raises(ConfigError, match="hidden_size"):
        runpy.run_path(str(SCRIPT))["shape_model"](type(shape)(1, 1, 1, 1, tiny={"hidden_size": 1 << 20}))
