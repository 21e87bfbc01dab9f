"""flash-attn only where the dtype allows: its kernels take fp16/bf16, so a float32 model runs sdpa, said in the log."""

from __future__ import annotations

import logging
import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tools.patience import HANG_S  # noqa: E402
from v1.errors import ConfigError  # noqa: E402
from v1.inference import build_tiny_model  # noqa: E402
from v1.inference._engine import Engine, GenerationRequest, SamplingParams, TokenEvent  # noqa: E402
from v1.train import ModelConfig  # noqa: E402
from v1.train._model import attention_implementation, choose_attention  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def test_auto_takes_flash_attn_on_a_gpu_for_bf16_and_fp16_forward_passes() -> None:
    for dtype in (BF16, FP16):
        assert choose_attention("auto", dtype, on_gpu=True, flash_installed=True) == "flash_attention_2"


def test_auto_falls_back_to_sdpa_for_float32_and_names_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="v1.train._model"):
        assert choose_attention("auto", FP32, on_gpu=True, flash_installed=True) == "sdpa"
    assert "sdpa, not flash_attention_2" in caplog.text and "float32" in caplog.text


def test_auto_is_sdpa_without_flash_attn_or_off_a_gpu(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="v1.train._model"):
        assert choose_attention("auto", BF16, on_gpu=True, flash_installed=False) == "sdpa"
        assert choose_attention("auto", BF16, on_gpu=False, flash_installed=True) == "sdpa"
    assert caplog.text == "", "nothing to name: flash-attn was not an option"


def test_flash_attn_asked_for_with_float32_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"fp16/bf16 only.*float32"):
        choose_attention("flash_attention_2", FP32, on_gpu=True, flash_installed=True)
    assert choose_attention("flash_attention_2", BF16, on_gpu=True, flash_installed=True) == "flash_attention_2"
    assert choose_attention("eager", FP32, on_gpu=True, flash_installed=True) == "eager"
    with pytest.raises(ConfigError, match=r"model.attn_implementation = 'flash_attention_2': flash-attn takes fp16/bf16 only"):
        attention_implementation(ModelConfig(attn_implementation="flash_attention_2"), torch.device("cpu"))


def test_the_engine_serves_a_float32_model_that_asks_for_flash_attn_with_sdpa(caplog: pytest.LogCaptureFixture) -> None:
    """The built-in engine's copy of the policy is float32 (no autocast there) even when the trainer computes in bf16."""
    model, tokenizer = build_tiny_model({"seed": 3})
    model.config._attn_implementation = "flash_attention_2"
    with caplog.at_level(logging.WARNING, logger="v1.inference._engine"):
        engine = Engine(model.eval(), tokenizer)
    assert model.config._attn_implementation == "sdpa"
    assert "sdpa, not flash_attention_2" in caplog.text
    tokens: list[int] = []
    done = threading.Event()

    def collect(event: TokenEvent | None) -> None:
        if event is None:
            done.set()
        else:
            tokens.extend(event.token_ids)

    engine.start()
    try:
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        engine.submit(GenerationRequest(prompt_ids=[5, 6, 7], params=params, on_event=collect))
        assert done.wait(HANG_S)
    finally:
        engine.stop()
    assert len(tokens) == 4
