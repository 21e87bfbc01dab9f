"""`sample_from_logprobs`: the batched inverse-transform sampler draws each row's distribution exactly, never a filtered token."""

from __future__ import annotations

import math

import torch

from v1.inference._sampling import sample_from_logprobs


def test_evenly_spread_uniforms_land_on_each_token_in_proportion_to_its_probability() -> None:
    probs = torch.tensor([0.5, 0.0, 0.25, 0.125, 0.125])
    draws = 4096
    uniforms = (torch.arange(draws, dtype=torch.float64) + 0.5) / draws  # one uniform per 1/4096 of [0, 1)
    log_probs = probs.log().unsqueeze(0).expand(draws, -1)
    tokens = sample_from_logprobs(log_probs, uniforms)
    counts = torch.bincount(tokens, minlength=5).tolist()
    assert counts == [2048, 0, 1024, 512, 512]


def test_each_row_follows_its_own_distribution_and_filtered_tokens_never_appear() -> None:
    log_probs = torch.log_softmax(torch.tensor([[2.0, 1.0, float("-inf"), 0.5], [float("-inf"), 0.0, 0.0, float("-inf")]]), -1)
    edges = torch.tensor([0.0, 1.0 - 2**-53], dtype=torch.float64)  # the smallest and the largest uniform
    for u in edges:
        tokens = sample_from_logprobs(log_probs, torch.stack([u, u]))
        assert tokens[0].item() != 2 and tokens[1].item() in (1, 2)
    assert sample_from_logprobs(log_probs, torch.tensor([0.0, 0.0], dtype=torch.float64)).tolist() == [0, 1]
    last = sample_from_logprobs(log_probs, torch.tensor([1.0 - 2**-53] * 2, dtype=torch.float64)).tolist()
    assert last == [3, 2]


def test_a_seeded_batch_matches_the_empirical_distribution() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.tensor([[1.0, 0.0, -1.0, 2.0]])
    log_probs = torch.log_softmax(logits, -1).expand(20_000, -1)
    tokens = sample_from_logprobs(log_probs, torch.rand(20_000, generator=generator, dtype=torch.float64))
    frequencies = torch.bincount(tokens, minlength=4).double() / 20_000
    expected = torch.softmax(logits[0].double(), -1)
    assert torch.all((frequencies - expected).abs() < 4 * torch.sqrt(expected * (1 - expected) / 20_000)), (frequencies, expected)
    assert math.isclose(float(frequencies.sum()), 1.0)
