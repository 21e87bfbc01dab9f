"""The trainer's torch threads on CPU leave the built-in engine and the event loop their cores; the engine's batch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from v1.train import TrainConfig  # noqa: E402
from v1.train._run import builtin_batch_size, call_with_torch_threads, trainer_cpu_threads  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


def test_the_trainer_takes_the_cores_the_engine_and_the_loop_leave_it() -> None:
    config = TrainConfig.load(RECIPE)
    cpu = torch.device("cpu")
    assert trainer_cpu_threads(config, cpu, cpu_count=2) == 1
    assert trainer_cpu_threads(config, cpu, cpu_count=1) == 1
    assert trainer_cpu_threads(config, cpu, cpu_count=16) == 14
    external = config.model_copy(update={"inference": config.inference.model_copy(update={"base_url": "http://127.0.0.1:1/v1"})})
    assert trainer_cpu_threads(external, cpu, cpu_count=2) is None, "no engine here: torch's default"
    assert trainer_cpu_threads(config, torch.device("meta"), cpu_count=2) is None, "not a CPU trainer"


async def test_a_worker_thread_runs_the_trainer_with_that_many_threads() -> None:
    before = torch.get_num_threads()
    seen = await asyncio.to_thread(call_with_torch_threads, 1, torch.get_num_threads)
    assert seen == 1
    assert await asyncio.to_thread(call_with_torch_threads, None, lambda: "as is") == "as is"
    assert torch.get_num_threads() == before, "the count is per thread: the event loop's thread keeps its own"


def test_the_built_in_server_decodes_every_rollout_in_flight_in_one_step_unless_told() -> None:
    config = TrainConfig.load(RECIPE)
    assert config.inference.max_batch_size is None
    assert builtin_batch_size(config) == config.rollouts.max_concurrent == 128
    told = config.model_copy(update={"inference": config.inference.model_copy(update={"max_batch_size": 8})})
    assert builtin_batch_size(told) == 8
