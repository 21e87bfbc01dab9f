import math

import pytest

torch = pytest.importorskip("torch")

from v1.train import LossConfig, policy_loss  # noqa: E402


def tensors(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grpo_clips_the_ratio_and_averages_per_sequence():
    # ratio = exp(lp - inf): token0 r=e^0.5~1.65 (A>0: clipped at 1.2), token1 r=1, token2 masked.
    logprobs = tensors([-0.5, -1.0, -3.0], [-2.0, -9.0, -9.0]).requires_grad_()
    inference = tensors([-1.0, -1.0, -1.0], [-1.0, -9.0, -9.0])
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = tensors([1, 1, 0], [1, 0, 0])
    result = policy_loss(logprobs, inference, advantages, mask, LossConfig(kind="grpo"))
    r_b = math.exp(-1.0)  # sequence 2, A = -1: -min(r*A, clip(r)*A) = -(-0.8) = 0.8 (clip at 0.8 binds)
    seq1 = (-1.2 * 1.0 + -1.0 * 1.0) / 2  # token0 clipped (1.2), token1 r=1
    seq2 = -min(r_b * -1.0, 0.8 * -1.0)
    assert result.loss.item() == pytest.approx((seq1 + seq2) / 2)
    assert result.clipped_tokens == 2 and result.loss_tokens == 3
    result.loss.backward()
    # clipped tokens get no gradient; the unclipped, unmasked one does; masked tokens never do.
    assert logprobs.grad[0, 0].item() == 0.0
    assert logprobs.grad[0, 1].item() == pytest.approx(-1.0 / 2 / 2)
    assert logprobs.grad[0, 2].item() == 0.0
    assert logprobs.grad[1, 0].item() == 0.0


def test_dapo_normalizes_per_token_and_clips_higher():
    logprobs = tensors([math.log(1.25), 0.0, 0.0], [0.0, 0.0, 0.0]).requires_grad_()
    inference = torch.zeros(2, 3, dtype=torch.float64)
    advantages = torch.tensor([1.0, 2.0], dtype=torch.float64)
    mask = tensors([1, 1, 1], [1, 0, 0])
    result = policy_loss(logprobs, inference, advantages, mask, LossConfig(kind="dapo"))
    # r=1.25 < 1.28: not clipped under dapo's upper clip (it would be under grpo's 1.2)
    assert result.clipped_tokens == 0
    assert result.loss.item() == pytest.approx(-(1.25 + 1 + 1 + 2) / 4)
    grpo = policy_loss(logprobs, inference, advantages, mask, LossConfig(kind="grpo"))
    assert grpo.clipped_tokens == 1
    assert grpo.loss.item() == pytest.approx(-((1.2 + 1 + 1) / 3 + 2) / 2)


def test_token_normalization_uses_the_step_total_across_micro_batches():
    logprobs = tensors([0.0, 0.0]).requires_grad_()
    inference = torch.zeros(1, 2, dtype=torch.float64)
    mask = tensors([1, 1])
    result = policy_loss(
        logprobs, inference, torch.tensor([1.0], dtype=torch.float64), mask, LossConfig(kind="dapo"), total_tokens=8
    )
    assert result.loss.item() == pytest.approx(-2 / 8)
    seq = policy_loss(
        logprobs, inference, torch.tensor([1.0], dtype=torch.float64), mask, LossConfig(kind="grpo"), total_sequences=4
    )
    assert seq.loss.item() == pytest.approx(-1 / 4)


def test_cispo_keeps_gradient_on_clipped_tokens_with_a_bounded_weight():
    # r = e^2 ~ 7.39 > 1 + 4: weight clipped to 5, still a gradient of -5 * A per token (a grpo clip gives 0).
    logprobs = tensors([2.0, 0.0]).requires_grad_()
    inference = torch.zeros(1, 2, dtype=torch.float64)
    advantages = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    mask = tensors([1, 1])
    result = policy_loss(logprobs, inference, advantages, mask, LossConfig(kind="cispo"))
    assert result.loss.item() == pytest.approx(-(5.0 * 2.0 + 1.0 * 0.0) / 2)
    assert result.clipped_tokens == 1
    result.loss.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([-5.0 / 2, -1.0 / 2])


def test_kl_to_the_reference_is_the_k3_estimate_on_loss_tokens():
    logprobs = tensors([0.0, 0.0]).requires_grad_()
    inference = torch.zeros(1, 2, dtype=torch.float64)
    reference = tensors([-1.0, -5.0])
    mask = tensors([1, 0])
    result = policy_loss(
        logprobs,
        inference,
        torch.zeros(1, dtype=torch.float64),
        mask,
        LossConfig(kind="dapo", kl_coef=0.5),
        ref_logprobs=reference,
    )
    k3 = math.exp(-1.0) + 1.0 - 1.0
    assert result.kl_sum == pytest.approx(k3)
    assert result.loss.item() == pytest.approx(0.5 * k3)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(logprobs, inference, torch.zeros(1), mask, LossConfig(kl_coef=0.1))


def test_bad_loss_config_names_the_field():
    from v1.errors import ConfigError

    with pytest.raises(ConfigError, match="kind"):
        LossConfig(kind="ppo")
    with pytest.raises(ConfigError, match="clip_low"):
        LossConfig(clip_low=2.0)
    with pytest.raises(ConfigError, match="sampler_correction"):
        LossConfig(sampler_correction="token_clip")
    with pytest.raises(ConfigError, match=r"sampler_cap_min \(3.0\) must be below sampler_cap \(2.0\)"):
        LossConfig(sampler_cap=2.0, sampler_cap_min=3.0)


def trl_reference_loss(logprobs, old, sampling, advantages, mask, *, loss_type, eps_low, eps_high, level, mode, cap, cap_min):
    """TRL 1.16's GRPOTrainer._compute_loss and its vLLM importance-sampling ratio, transcribed (one step,
    no accumulation): an independent reference for v1's `policy_loss`."""
    log_ratio = logprobs - old
    if level == "token":
        log_weights = log_ratio
    else:
        log_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_weights)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
    if mode is not None:
        diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
        if mode.startswith("sequence"):
            diff = diff.sum(dim=-1, keepdim=True)
        ratio = torch.exp(diff)
        if mode.endswith("truncate"):
            ratio = torch.clamp(ratio, min=cap_min, max=cap)
        else:
            low = cap_min if cap_min is not None else -math.inf
            ratio = ratio.masked_fill((ratio < low) | (ratio > cap), 0.0)
        per_token_loss = per_token_loss * ratio
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)


def mismatched_batch(seed):
    generator = torch.Generator().manual_seed(seed)
    shape = (4, 6)
    sampling = -torch.rand(shape, generator=generator, dtype=torch.float64) * 3
    old = sampling + torch.randn(shape, generator=generator, dtype=torch.float64) * 0.6  # trainer vs sampler mismatch
    logprobs = old + torch.randn(shape, generator=generator, dtype=torch.float64) * 0.3
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float64)
    return logprobs, old, sampling, advantages, mask


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", [None, "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
@pytest.mark.parametrize("kind", ["grpo", "dapo"])
def test_gspo_and_sampler_correction_match_trl(level, mode, kind):
    for seed in range(3):
        logprobs, old, sampling, advantages, mask = mismatched_batch(seed)
        config = LossConfig(
            kind=kind,
            importance_sampling_level=level,
            sampler_correction=mode or "none",
            sampler_cap=2.0,
            sampler_cap_min=0.5 if seed == 2 else None,
        )
        # without a correction v1's ratio is against the sampler's logprobs: TRL's with old = sampling
        reference_old = old if mode is not None else sampling
        ours = logprobs.clone().requires_grad_()
        result = policy_loss(ours, sampling, advantages, mask, config, old_logprobs=old if mode else None)
        theirs = logprobs.clone().requires_grad_()
        expected = trl_reference_loss(
            theirs, reference_old, sampling, advantages, mask, loss_type=kind, eps_low=0.2,
            eps_high=config.upper_clip, level=level, mode=mode, cap=2.0, cap_min=config.sampler_cap_min,
        )  # fmt: skip
        assert result.loss.item() == pytest.approx(expected.item(), rel=1e-12, abs=1e-12)
        result.loss.backward()
        expected.backward()
        assert torch.allclose(ours.grad, theirs.grad, rtol=1e-10, atol=1e-12)


def test_gspo_clips_one_ratio_per_sequence():
    # log-ratios 0.5 and -0.1 over two tokens: the sequence's ratio is exp(0.2) = 1.22 > 1.2, so every token is clipped
    logprobs = tensors([0.5, -0.1]).requires_grad_()
    inference = torch.zeros(1, 2, dtype=torch.float64)
    result = policy_loss(
        logprobs,
        inference,
        torch.tensor([1.0], dtype=torch.float64),
        tensors([1, 1]),
        LossConfig(importance_sampling_level="sequence"),
    )
    assert result.clipped_tokens == 2
    assert result.ratio_sum == pytest.approx(2 * math.exp(0.2))
    result.loss.backward()
    assert logprobs.grad.abs().sum().item() == 0.0


def test_masked_importance_sampling_drops_tokens_past_the_cap_and_truncation_bounds_them():
    logprobs = tensors([0.0, 0.0]).requires_grad_()
    old = tensors([0.0, 0.0])
    inference = tensors([-2.0, -0.1])  # sampler weights e^2 = 7.4 (past the cap 3) and e^0.1 = 1.1
    advantages = torch.tensor([1.0], dtype=torch.float64)
    mask = tensors([1, 1])
    masked = policy_loss(
        logprobs, inference, advantages, mask, LossConfig(kind="dapo", sampler_correction="token_mask"), old_logprobs=old
    )
    assert masked.loss.item() == pytest.approx(-math.exp(0.1) / 2)
    assert masked.sampler_bounded_tokens == 1
    truncated = policy_loss(
        logprobs, inference, advantages, mask, LossConfig(kind="dapo", sampler_correction="token_truncate"), old_logprobs=old
    )
    assert truncated.loss.item() == pytest.approx(-(3.0 + math.exp(0.1)) / 2)
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(logprobs, inference, advantages, mask, LossConfig(sampler_correction="token_mask"))
