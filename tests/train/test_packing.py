"""Micro-batches by a token budget: packed rows give each sample exactly its own log-probabilities and gradient."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v1.errors import ConfigError  # noqa: E402
from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
    PolicyTrainer,
    TrainConfig,
)
from v1.train._batch import Sample, collate  # noqa: E402
from v1.train._logprobs import token_logprobs  # noqa: E402
from v1.train._packing import pack_by_tokens, packed_row  # noqa: E402


def qwen2(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attn_implementation="sdpa",
    )  # fmt: skip
    return transformers.Qwen2ForCausalLM(config)


def samples() -> list[Sample]:
    built = []
    for number, length in enumerate((7, 11, 4, 9)):
        ids = [(3 * number + 5 * i) % 60 + 2 for i in range(length)]
        mask = [0] * 3 + [1] * (length - 3)
        built.append(Sample(ids, mask, [-1.5 * m for m in mask], [(-1.0) ** number * m for m in mask]))
    return built


def test_bins_respect_the_budget_and_a_long_sample_gets_its_own() -> None:
    bins = pack_by_tokens(samples(), 16)
    assert sorted(len(s.input_ids) for b in bins for s in b) == [4, 7, 9, 11]
    assert all(sum(len(s.input_ids) for s in b) <= 16 for b in bins) and len(bins) == 2
    assert [len(b) for b in pack_by_tokens(samples(), 5)] == [1, 1, 1, 1]
    for bad in (0, -3):
        with pytest.raises(ValueError, match="max_tokens"):
            pack_by_tokens(samples(), bad)
        with pytest.raises(ValueError, match="micro_batch_tokens"):
            PolicyTrainer(qwen2(), LossConfig(), OptimConfig(), max_steps=1, micro_batch_tokens=bad)


def test_a_packed_row_gives_each_sample_its_own_logprobs() -> None:
    model = qwen2().eval()
    chunk = samples()
    row = packed_row(chunk)
    padded = collate(chunk)
    with torch.no_grad():
        packed, _ = token_logprobs(model, row.input_ids, None, row.targets, position_ids=row.position_ids)
        for number, sample in enumerate(chunk):
            alone = torch.tensor([sample.input_ids])
            expected, _ = token_logprobs(model, alone, torch.ones_like(alone), alone[:, 1:])
            got = row.unpack(packed)[number, : len(sample.input_ids) - 1]
            assert torch.allclose(got, expected[0], atol=1e-5), f"sample {number} saw another sample's tokens"
    assert row.unpack(packed).shape == padded.targets.shape


@pytest.mark.parametrize("kind", ["grpo", "dapo"])
def test_packed_micro_batches_give_the_padded_step(kind: str) -> None:
    results = []
    for tokens in (None, 16):
        model = qwen2()
        trainer = PolicyTrainer(model, LossConfig(kind=kind), OptimConfig(lr=1e-3), max_steps=1, micro_batch_size=2,
                                micro_batch_tokens=tokens)  # fmt: skip
        stats = trainer.train_step(samples())
        results.append((torch.cat([p.detach().flatten() for p in model.parameters()]), stats))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)  # float noise, amplified by Adam near g = 0
    assert results[0][1]["loss"] == pytest.approx(results[1][1]["loss"], abs=1e-6)
    assert results[0][1]["grad_norm"] == pytest.approx(results[1][1]["grad_norm"], rel=1e-5)
    assert results[0][1]["trainer_tokens"] == results[1][1]["trainer_tokens"] == 31


@pytest.mark.parametrize(
    ("field", "value"),
    [("micro_batch_tokens", "0"), ("micro_batch_tokens", "-4096"), ("micro_batch_tokens", '"lots"'),
     ("micro_batch_tokens", "1.5")],
)  # fmt: skip
def test_a_bad_token_budget_fails_with_its_path(tmp_path: Path, field: str, value: str) -> None:
    recipe = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny_first_letter.toml"
    text = recipe.read_text().replace("micro_batch_size = 64", f"micro_batch_size = 64\n{field} = {value}")
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError, match=field):
        TrainConfig.load(tmp_path / "bad.toml")
