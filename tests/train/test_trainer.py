"""`PolicyTrainer` on a tiny transformers model built from a config (no download)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
)
from v1.train._batch import Sample, collate  # noqa: E402
from v1.train._logprobs import token_logprobs  # noqa: E402
from v1.train._trainer import PolicyTrainer, lr_factor  # noqa: E402


def tiny_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
    )
    return transformers.LlamaForCausalLM(config)


def on_policy_samples(model: torch.nn.Module, advantages: list[float]) -> list[Sample]:
    samples = []
    for i, advantage in enumerate(advantages):
        ids = [1, 2 + i, 3, 4 + i, 5, 6]
        mask = [0, 0, 0, 1, 1, 1]
        samples.append(Sample(ids, mask, [0.0] * 6, [advantage * m for m in mask]))
    batch = collate(samples)
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    for sample, row in zip(samples, logprobs):
        sample.inference_logprobs = [0.0] + [lp if m else 0.0 for lp, m in zip(row.tolist(), sample.loss_mask[1:])]
    return samples


def completion_logprob(model: torch.nn.Module, sample: Sample) -> float:
    batch = collate([sample])
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    return float((logprobs * batch.loss_mask).sum())


def test_a_step_raises_the_logprob_of_positive_advantage_tokens_and_lowers_negative_ones() -> None:
    model = tiny_model()
    samples = on_policy_samples(model, [1.0, -1.0])
    before = [completion_logprob(model, s) for s in samples]
    trainer = PolicyTrainer(model, LossConfig(kind="grpo"), OptimConfig(lr=1e-2), max_steps=10, micro_batch_size=1)
    stats = trainer.train_step(samples)
    after = [completion_logprob(model, s) for s in samples]
    assert after[0] > before[0] and after[1] < before[1]
    assert stats["mismatch_kl"] == pytest.approx(0.0, abs=1e-5)  # the samples' logprobs are this policy's
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["clip_fraction"] == 0.0
    assert stats["loss_tokens"] == 6 and stats["entropy"] > 0 and trainer.step == 1


@pytest.mark.parametrize("kind", ["grpo", "dapo", "cispo"])
def test_gradient_accumulation_does_not_change_the_step(kind: str) -> None:
    results = []
    for micro in (1, 3):
        model = tiny_model()
        samples = on_policy_samples(model, [1.0, -0.5, 0.25])
        trainer = PolicyTrainer(model, LossConfig(kind=kind), OptimConfig(lr=1e-3), max_steps=1, micro_batch_size=micro)
        trainer.train_step(samples)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


def test_sft_step_and_kl_to_a_reference() -> None:
    model = tiny_model()
    samples = on_policy_samples(model, [0.0])
    before = completion_logprob(model, samples[0])
    trainer = PolicyTrainer(model, LossConfig(kind="sft"), OptimConfig(lr=1e-2), max_steps=5)
    stats = trainer.train_step(samples)
    assert completion_logprob(model, samples[0]) > before and stats["loss"] > 0
    assert stats["loss"] == pytest.approx(-before / 3, rel=1e-5)  # the mean negative log-likelihood of the 3 answer tokens
    reference = copy.deepcopy(model).eval()
    kl_trainer = PolicyTrainer(
        model, LossConfig(kind="dapo", kl_coef=0.1), OptimConfig(lr=1e-2), max_steps=5, ref_model=reference
    )
    assert kl_trainer.train_step(on_policy_samples(model, [1.0]))["kl"] == pytest.approx(0.0, abs=1e-6)
    assert kl_trainer.train_step(on_policy_samples(model, [1.0]))["kl"] > 0  # moved away from the reference
    with pytest.raises(ValueError, match="ref_model"):
        PolicyTrainer(model, LossConfig(kl_coef=0.1), OptimConfig(), max_steps=1)


def test_lr_schedule() -> None:
    optim = OptimConfig(lr=1.0, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    assert [round(lr_factor(s, optim, 12), 3) for s in (0, 1, 2, 7, 12)] == [0.5, 1.0, 1.0, 0.55, 0.1]
    assert lr_factor(5, OptimConfig(schedule="linear"), 10) == pytest.approx(0.5)


def test_save_and_load_restore_the_optimizer_and_step(tmp_path: Path) -> None:
    model = tiny_model()
    trainer = PolicyTrainer(model, LossConfig(), OptimConfig(lr=1e-2, schedule="linear"), max_steps=4)
    trainer.train_step(on_policy_samples(model, [1.0, -1.0]))
    trainer.save(tmp_path)
    restored = PolicyTrainer(copy.deepcopy(model), LossConfig(), OptimConfig(lr=1e-2, schedule="linear"), max_steps=4)
    restored.load(tmp_path)
    assert restored.step == 1 and restored.scheduler.get_last_lr() == trainer.scheduler.get_last_lr()
    state = restored.optimizer.state_dict()["state"]
    assert state and all(torch.equal(state[k]["exp_avg"], trainer.optimizer.state_dict()["state"][k]["exp_avg"]) for k in state)


def test_mismatch_kl_counts_fresh_samples_only_and_staleness_has_its_own_metric() -> None:
    model = tiny_model()
    fresh = on_policy_samples(model, [1.0, -1.0])
    stale = on_policy_samples(tiny_model(seed=1), [0.5, -0.5])  # generated by other (older) weights
    for sample in stale:
        sample.staleness = 1
    trainer = PolicyTrainer(model, LossConfig(), OptimConfig(lr=1e-3), max_steps=1, micro_batch_size=3)
    stats = trainer.train_step(fresh + stale)
    assert stats["mismatch_kl"] == pytest.approx(0.0, abs=1e-5)  # a healthy weight sync shows as zero
    assert abs(stats["stale_kl"]) > 1e-2 and stats["fresh_tokens"] == 6


def test_logprobs_at_the_loss_positions_only_equal_the_full_ones_there_with_the_same_gradient() -> None:
    model = tiny_model()
    samples = on_policy_samples(model, [1.0, -1.0, 0.5])
    batch = collate(samples)
    where = batch.loss_mask > 0
    full, full_entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    (full * batch.loss_mask).sum().backward()
    full_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    only, only_entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets, where=where)
    (only * batch.loss_mask).sum().backward()
    torch.testing.assert_close(only[where], full[where])
    torch.testing.assert_close(only_entropy[where], full_entropy[where])
    assert bool((only[~where] == 0).all()) and bool((only_entropy[~where] == 0).all()), "the head never ran there"
    for got, expected in zip((p.grad for p in model.parameters()), full_grads):
        torch.testing.assert_close(got, expected)
    nowhere = torch.zeros_like(where)
    torch.testing.assert_close(
        token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets, where=nowhere)[0], full.detach()
    )


def test_sampler_correction_weighs_tokens_by_the_trainer_over_sampler_ratio_and_clips_against_the_trainer() -> None:
    model = tiny_model()
    samples = on_policy_samples(tiny_model(seed=1), [1.0, -1.0, 0.5])  # sampled by other weights: a mismatch
    batch = collate(samples)
    with torch.no_grad():
        trainer_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets)
    where = batch.loss_mask > 0
    weights = torch.exp(trainer_logprobs - batch.inference_logprobs)[where]
    ordered = weights.sort().values
    half = len(ordered) // 2
    cap = float(ordered[half - 1] + ordered[half]) / 2  # half the tokens' weights are truncated, none near the cap
    loss = LossConfig(kind="grpo", sampler_correction="token_truncate", sampler_cap=cap)
    trainer = PolicyTrainer(model, loss, OptimConfig(lr=1e-2, updates_per_step=2), max_steps=1, micro_batch_size=2)
    stats = trainer.train_step(samples)
    # the first update's ratio is against the trainer's own logprobs (1 everywhere); the weight carries the mismatch
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert stats["sampler_weight_mean"] == pytest.approx(weights.clamp(max=cap).mean().item(), rel=1e-5)
    assert stats["sampler_bounded_fraction"] == pytest.approx((weights > cap).float().mean().item())
    assert 0 < stats["sampler_bounded_fraction"] < 1
    uncorrected = PolicyTrainer(tiny_model(), LossConfig(kind="grpo"), OptimConfig(lr=1e-2), max_steps=1, micro_batch_size=2)
    assert uncorrected.train_step(samples)["ratio_mean"] != pytest.approx(1.0, abs=1e-3)


def test_clip_fraction_is_the_mean_over_every_update_of_the_step() -> None:
    """With a sampler correction the first update's ratio is 1 (nothing clipped); the later updates clip."""
    model = tiny_model()
    samples = on_policy_samples(model, [1.0, -1.0, 0.5, -0.5])
    loss = LossConfig(kind="grpo", sampler_correction="token_truncate", clip_low=0.01)
    trainer = PolicyTrainer(model, loss, OptimConfig(lr=0.05, updates_per_step=3), max_steps=1, micro_batch_size=4)
    seen: list[float] = []
    update = trainer._update

    def recorded(*args: object) -> dict[str, float]:
        stats = update(*args)  # type: ignore[arg-type]
        seen.append(stats["clip_fraction"])
        return stats

    trainer._update = recorded  # type: ignore[method-assign]
    stats = trainer.train_step(samples)
    assert seen[0] == 0.0 and max(seen[1:]) > 0, seen
    assert stats["clip_fraction"] == pytest.approx(sum(seen) / len(seen))
