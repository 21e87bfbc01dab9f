"""LoRA through peft: only the adapters train, and the loss is the one of the merged weights."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from v1.train import (  # noqa: E402
    LossConfig,
    PolicyTrainer,
)
from v1.train._batch import Sample, collate  # noqa: E402
from v1.train._config import LoraSection, OptimConfig  # noqa: E402
from v1.train._logprobs import token_logprobs  # noqa: E402
from v1.train._lora import merged_state_dict, with_lora  # noqa: E402

R, ALPHA = 4, 8


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
    )
    return transformers.LlamaForCausalLM(config)


def samples_of(model: torch.nn.Module) -> list[Sample]:
    samples = []
    for i, advantage in enumerate([1.0, -1.0, 0.5]):
        ids = [1, 2 + i, 3, 4 + i, 5, 6]
        mask = [0, 0, 0, 1, 1, 1]
        samples.append(Sample(ids, mask, [0.0] * 6, [advantage * m for m in mask]))
    batch = collate(samples)
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    for sample, row in zip(samples, logprobs):
        sample.inference_logprobs = [0.0] + [lp if m else 0.0 for lp, m in zip(row.tolist(), sample.loss_mask[1:])]
    return samples


def merged_by_hand(base: torch.nn.Module, lora_model: torch.nn.Module) -> torch.nn.Module:
    """`base` with W + (alpha / r) * B @ A for every adapted linear layer, from the adapters' parameters."""
    merged = copy.deepcopy(base)
    adapters = dict(lora_model.named_parameters())
    with torch.no_grad():
        for name, module in merged.named_modules():
            a = adapters.get(f"base_model.model.{name}.lora_A.default.weight")
            if a is not None:
                b = adapters[f"base_model.model.{name}.lora_B.default.weight"]
                module.weight += (ALPHA / R) * b @ a
    return merged


def grpo_loss_by_hand(model: torch.nn.Module, samples: list[Sample]) -> float:
    batch = collate(samples)
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    ratio = torch.exp(logprobs - batch.inference_logprobs)
    advantages = batch.advantages
    per_token = -torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    mask = batch.loss_mask
    return float(((per_token * mask).sum(1) / mask.sum(1)).mean())


def test_lora_steps_change_only_the_adapters_and_the_loss_is_the_merged_weights_one() -> None:
    base = tiny_model()
    samples = samples_of(base)
    model = with_lora(copy.deepcopy(base), LoraSection(r=R, alpha=ALPHA))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-2), max_steps=3, micro_batch_size=2)
    trainer.train_step(samples)
    for _ in range(2):
        expected = grpo_loss_by_hand(merged_by_hand(base, model), samples)
        stats = trainer.train_step(samples)
        assert stats["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    after = dict(model.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name].detach())}
    assert changed and changed <= trainable
    assert any(".lora_B." in name for name in changed)  # B starts at zero: the adapters really moved
    # what the weight sync sends: the merged weights under the base model's names
    by_hand = merged_by_hand(base, model).state_dict()
    sent = merged_state_dict(model)
    assert sent.keys() == by_hand.keys()
    assert all(torch.allclose(sent[name], by_hand[name], atol=1e-6) for name in sent)
