"""Sharding saves memory (#35): at 2 ranks each holds half of what one process holds, a weight push
streams whole tensors one at a time into rank 0's engine, never gathering a whole state dict, and a
CPU rank gives freed large buffers back to the system."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from v1.inference import build_tiny_model  # noqa: E402

from .fsdp_steps import SHAPE, batch, held_bytes, new_trainer  # noqa: E402
from .test_distributed import ROOT, torchrun  # noqa: E402


def one_process_bytes(tied: bool) -> dict[str, int]:
    """What one process without FSDP holds: parameters, gradients (as AdamW steps) and AdamW state."""
    model, _ = build_tiny_model({**SHAPE, "tie_word_embeddings": tied})
    trainer = new_trainer(model)
    trainer.train_step(batch(0))
    adam = held_bytes(value for state in trainer.optimizer.state.values() for value in state.values() if value.dim() > 0)
    params = held_bytes(model.parameters())
    return {"params": params, "grads": params, "adam": adam}


def test_two_ranks_each_hold_half_the_training_state_and_push_one_whole_tensor_at_a_time(tmp_path: Path) -> None:
    done = torchrun(str(ROOT / "tests" / "train" / "fsdp_memory.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "memory.json").read_text())
    assert report["world"] == 2
    for tied in (False, True):
        kind = "tied" if tied else "untied"
        whole = one_process_bytes(tied)
        ranks = [every[kind] for every in report["ranks"]]
        for part in ("params", "grads", "adam"):
            assert sum(rank[part] for rank in ranks) == whole[part], (kind, part)  # nothing held twice
            for rank in ranks:  # about half each (an odd vocabulary splits one row unevenly)
                assert rank[part] <= 0.52 * whole[part], (kind, part, rank[part], whole[part])
        leader = ranks[0]
        for rank in ranks:
            assert rank["streamed"], kind  # the built-in engine under FSDP2: streamed, not a gathered state dict
            assert rank["names"] == leader["names"], kind  # every rank gathers in the same order
            assert sorted(rank["names"]) == sorted(leader["state_dict_names"]), kind  # every weight
            assert rank["alive_bytes"] == 0, kind  # each whole tensor freed before the next: never a state dict
            assert 0 < rank["largest_bytes"] < whole["params"] / 2, kind  # one tensor, not the model
        assert leader["weight_version"] == 1, kind  # one update, however many tensors
        assert leader["engine_differs"] == [], kind  # the engine serves the trained weights
        assert leader["engine_tied"] is tied, kind
    assert all(every["freed_block_returned_mib"] >= 15 for every in report["ranks"])  # `RankGroup.start` set the threshold


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not Path("/proc/self/status").exists(), reason="glibc on Linux only")
def test_a_cpu_rank_returns_a_freed_whole_layer_buffer_to_the_system() -> None:
    def returned_mib(mode: str) -> int:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        script = str(ROOT / "tests" / "train" / "fsdp_memory.py")
        done = subprocess.run(
            [sys.executable, script, "--freed-block", mode], capture_output=True, text=True, env=env, check=True
        )
        return int(done.stdout.strip())

    assert returned_mib("dynamic") <= 1  # glibc's default: the freed 16 MiB stays in the process
    assert returned_mib("fixed") >= 15  # what `RankGroup.start` sets on gloo ranks: it goes back
