"""At temperature != 1 and top-p / top-k, the server reports the sampled distribution's logprobs and the trainer recomputes them."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
pytest.importorskip("transformers")

from tests.tools.patience import HANG_S  # noqa: E402
from v1.errors import ConfigError  # noqa: E402
from v1.inference import (  # noqa: E402
    InferenceServer,
    LogitProcessing,
    build_tiny_model,
)
from v1.train import TrainConfig  # noqa: E402
from v1.train._logprobs import token_logprobs  # noqa: E402
from v1.train._run import rollout_processing  # noqa: E402

TINY = {"architecture": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "seed": 0}  # fmt: skip
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"


async def sampled(server: InferenceServer, **sampling: float) -> list[tuple[list[int], list[float]]]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "abc"}], "max_tokens": 12, "n": 6, "seed": 3,
            "logprobs": True, "return_token_ids": True, **sampling}  # fmt: skip
    async with httpx.AsyncClient(timeout=HANG_S) as client:
        answer = (await client.post(server.url + "/chat/completions", json=body)).json()
    prompt = answer["prompt_token_ids"]
    return [
        (prompt + choice["token_ids"], [item["logprob"] for item in choice["logprobs"]["content"]])
        for choice in answer["choices"]
    ]


def recomputed(model: torch.nn.Module, ids: list[int], length: int, processing: LogitProcessing) -> list[float]:
    tensor = torch.tensor([ids])
    with torch.no_grad():
        logprobs, entropy = token_logprobs(model, tensor, torch.ones_like(tensor), tensor[:, 1:], processing)
    assert torch.isfinite(entropy).all()
    return logprobs[0, -length:].tolist()


@pytest.mark.parametrize("sampling", [{"temperature": 0.7, "top_p": 0.8}, {"temperature": 1.6, "top_k": 5}])
async def test_trainer_recomputes_the_servers_processed_logprobs(sampling: dict[str, float]) -> None:
    model, tokenizer = build_tiny_model(TINY)
    model.eval()
    processing = LogitProcessing.from_sampling_args(sampling)
    async with InferenceServer(model, tokenizer, model_name="tiny") as server:
        choices = await sampled(server, **sampling)
    differs = False
    for ids, served in choices:
        assert served and all(value <= 0.0 for value in served)
        assert recomputed(model, ids, len(served), processing) == pytest.approx(served, abs=1e-4)
        raw = recomputed(model, ids, len(served), LogitProcessing())
        differs = differs or raw != pytest.approx(served, abs=1e-3)
    assert differs, "the processed distribution must not be the raw one at these settings"


def test_rollout_sampling_args_that_make_no_distribution_fail_with_one_line(tmp_path: Path) -> None:
    config = TrainConfig.load(RECIPE)
    for bad in ({"temperature": -1}, {"temperature": "hot"}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": -3},
                {"top_k": "many"}, {"temperature": float("inf")}, {"temperature": None}):  # fmt: skip
        rollouts = config.rollouts.model_copy(update={"sampling_args": {"max_tokens": 4, **bad}})
        with pytest.raises(ConfigError, match=r"rollouts\.sampling_args"):
            rollout_processing(config.model_copy(update={"rollouts": rollouts}))
    assert rollout_processing(config) == LogitProcessing(1.0, 1.0, 0)
