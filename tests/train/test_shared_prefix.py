"""Shared prefixes: a group's prompt runs once per micro-batch, and every log-probability and gradient stays the same."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from v1.inference import LogitProcessing  # noqa: E402
from v1.train import (  # noqa: E402
    LossConfig,
    OptimConfig,
    PolicyTrainer,
)
from v1.train._batch import Sample, collate  # noqa: E402
from v1.train._logprobs import activation_checkpointing, shared_prefix_logprobs, token_logprobs  # noqa: E402
from v1.train._shared_prefix import (  # noqa: E402
    micro_batches_by_prefix,
    plan_micro_batches,
    positions_run,
    shared_prefix_batch,
    shared_prefix_length,
)


def qwen2(seed: int = 0, **overrides: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attn_implementation="sdpa", **overrides,
    )  # fmt: skip
    return transformers.Qwen2ForCausalLM(config)


def completion(prompt: list[int], answer: list[int], advantage: float, tail: list[int] | None = None) -> Sample:
    """`prompt` then `answer` (trained), and optionally a tool reply (not trained) and a second answer (trained)."""
    ids, mask = [*prompt, *answer], [0] * len(prompt) + [1] * len(answer)
    if tail is not None:
        ids += [7, 8, *tail]
        mask += [0, 0] + [1] * len(tail)
    return Sample(ids, mask, [-1.2 * m for m in mask], [advantage * m for m in mask])


def groups(seed: int = 0, prompts: int = 3, size: int = 4) -> list[Sample]:
    """`prompts` groups of `size` rollouts; prompts of different lengths, answers of 1-4 tokens, one multi-turn answer."""
    rng = random.Random(seed)
    built = []
    for number in range(prompts):
        prompt = [rng.randrange(2, 60) for _ in range(6 + 3 * number)]
        for member in range(size):
            answer = [rng.randrange(2, 60) for _ in range(rng.randrange(1, 5))]
            tail = [rng.randrange(2, 60), 3] if number == 1 and member == 2 else None
            built.append(completion(prompt, answer, (-1.0) ** member * (0.5 + member), tail))
    rng.shuffle(built)
    return built


def padded_logprobs(model: torch.nn.Module, chunk: list[Sample], processing: LogitProcessing) -> tuple[torch.Tensor, ...]:
    batch = collate(chunk)
    where = batch.loss_mask > 0
    return token_logprobs(model, batch.input_ids, batch.attention_mask, batch.targets, processing, where=where)


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("processing", [LogitProcessing(), LogitProcessing(temperature=0.7, top_p=0.9, top_k=20)])
def test_each_prefix_runs_once_and_the_logprobs_and_gradients_are_the_padded_ones(processing: LogitProcessing) -> None:
    chunk = groups()
    layout = shared_prefix_batch(chunk)
    assert layout is not None
    assert layout.prefix_ids.shape[0] == 3  # 12 samples, 3 prompts
    mask = collate(chunk).loss_mask
    model = qwen2()
    shared = shared_prefix_logprobs(model, layout, processing)
    assert shared is not None
    (shared[0] * mask).sum().backward()
    shared_grad = flat_grad(model)
    model.zero_grad()
    padded = padded_logprobs(model, chunk, processing)
    (padded[0] * mask).sum().backward()
    assert shared[0].shape == padded[0].shape == mask.shape
    assert torch.allclose(shared[0], padded[0], atol=1e-5)
    assert torch.allclose(shared[1], padded[1], atol=1e-5)  # entropies
    assert bool((shared[0][mask > 0] < 0).all())  # every trained token got a value
    assert torch.allclose(shared_grad, flat_grad(model), rtol=1e-4, atol=1e-6)


def test_the_layout_is_refused_when_there_is_nothing_to_share() -> None:
    prompt = [5, 6, 7, 8, 9, 10]
    assert shared_prefix_batch([completion(prompt, [11], 1.0), completion([2], [11, 12], 1.0)]) is None  # loss at token 1
    assert shared_prefix_batch([Sample([2, 3, 4], [0, 0, 0], [0.0] * 3, [0.0] * 3)]) is None  # no loss token
    distinct = [completion([n, n + 1, n + 2, n + 3], [n + 4], 1.0) for n in range(2, 40, 5)]
    assert shared_prefix_batch(distinct) is None  # every prompt its own: more tokens than padding
    assert shared_prefix_batch([]) is None
    assert shared_prefix_length(completion(prompt, [11, 12], 1.0)) == 5


def test_micro_batches_keep_a_group_together() -> None:
    samples = groups(seed=1, prompts=8, size=8)
    batches = micro_batches_by_prefix(samples, 16)
    assert sorted(map(len, batches)) == [16, 16, 16, 16]
    for batch in batches:
        assert len({tuple(s.input_ids[: shared_prefix_length(s)]) for s in batch}) == 2


def test_the_plan_groups_prompts_only_when_that_runs_fewer_positions() -> None:
    short_answers = groups(seed=4, prompts=8, size=8)  # prompts of 6-27 tokens, answers of 1-4
    plan = plan_micro_batches(short_answers, 16)
    assert all(len({tuple(s.input_ids[: shared_prefix_length(s)]) for s in batch}) == 2 for batch in plan)
    rng = random.Random(5)
    long_answers = []
    for _ in range(4):  # 3-token prompts, answers of 2 to 400 tokens
        prompt = [rng.randrange(2, 60) for _ in range(3)]
        for _ in range(8):
            long_answers.append(completion(prompt, [rng.randrange(2, 60) for _ in range(rng.choice((2, 400)))], 1.0))
    plan = plan_micro_batches(long_answers, 8)
    lengths = [sorted(len(s.input_ids) for s in batch) for batch in plan]
    assert all(batch[-1] - batch[0] < 10 for batch in lengths)  # similar lengths together, not prompts
    assert positions_run(plan) < positions_run(micro_batches_by_prefix(long_answers, 8))


class TokenCounter:
    """A forward hook on the input embeddings: how many token positions the model ran."""

    def __init__(self) -> None:
        self.tokens = 0

    def __call__(self, module: object, inputs: tuple[torch.Tensor, ...], output: object) -> None:
        self.tokens += inputs[0].numel()


def train(share: bool, model: torch.nn.Module, samples: list[Sample], **options: object) -> dict[str, float]:
    trainer = PolicyTrainer(
        model, LossConfig(**options), OptimConfig(lr=1e-3, updates_per_step=2), max_steps=2, micro_batch_size=8,
        share_prefixes=share, ref_model=qwen2(seed=1) if options.get("kl_coef") else None,
        processing=LogitProcessing(temperature=0.8),
    )  # fmt: skip
    return trainer.train_step(samples)


@pytest.mark.parametrize("options", [{"kind": "grpo"}, {"kind": "dapo", "kl_coef": 0.1}])
def test_a_step_with_shared_prefixes_is_the_padded_step(options: dict[str, object]) -> None:
    results, embedded = [], []
    for share in (False, True):
        model = qwen2()
        counter = TokenCounter()
        model.get_input_embeddings().register_forward_hook(counter)
        stats = train(share, model, groups(seed=2, prompts=4, size=4), **options)
        results.append((torch.cat([p.detach().flatten() for p in model.parameters()]), stats))
        embedded.append(counter.tokens)
    (before, padded), (after, shared) = results
    assert torch.allclose(before, after, atol=1e-5)
    for name in ("loss", "grad_norm", "entropy", "kl", "mismatch_kl", "ratio_mean"):
        assert shared[name] == pytest.approx(padded[name], rel=1e-4, abs=1e-6), name
    assert embedded[1] < 0.7 * embedded[0]  # the policy ran each prompt once per micro-batch, not once per sample


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(lambda: qwen2(), id="gradient-checkpointing"),
        pytest.param(lambda: qwen2(use_sliding_window=True, sliding_window=4, max_window_layers=0), id="sliding-window"),
    ],
)
def test_a_model_that_cannot_share_runs_its_own_forward(model: object) -> None:
    samples = groups(seed=3)
    policy = model()  # type: ignore[operator]
    if not policy.config.use_sliding_window:
        policy.gradient_checkpointing_enable()
        assert activation_checkpointing(policy)
    trainer = PolicyTrainer(policy, LossConfig(), OptimConfig(lr=1e-3), max_steps=1, micro_batch_size=16, share_prefixes=True)
    shared = trainer.train_step(samples)
    assert trainer.share_prefixes is False
    reference = model()  # type: ignore[operator]
    if not reference.config.use_sliding_window:
        reference.gradient_checkpointing_enable()
    padded = PolicyTrainer(reference, LossConfig(), OptimConfig(lr=1e-3), max_steps=1, micro_batch_size=16).train_step(samples)
    assert shared["loss"] == pytest.approx(padded["loss"], rel=1e-6)  # the samples' order differs: float noise
    assert shared["grad_norm"] == pytest.approx(padded["grad_norm"], rel=1e-6)
