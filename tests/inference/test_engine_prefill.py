"""The engine prefills the requests it admits together: one forward pass per admission, one row per distinct prompt."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.tools.patience import HANG_S
from v1.inference import build_tiny_model
from v1.inference._engine import PREFILL_TOKEN_BUDGET, Engine, GenerationRequest, SamplingParams, TokenEvent, _prefill_chunks


def forward_logprobs(model: torch.nn.Module, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """The model's own log-probability of each completion token, from one forward pass over prompt + completion."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt_ids) - 1 + i, token]) for i, token in enumerate(completion_ids)]


class Collected:
    """One request's events, and a flag set when it finished."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.done = threading.Event()

    def __call__(self, event: TokenEvent | None) -> None:
        if event is None:
            self.done.set()
            return
        self.token_ids.extend(event.token_ids)
        self.logprobs.extend(event.logprobs)


def test_requests_admitted_together_share_one_prefill_pass_and_match_a_forward_pass() -> None:
    model, tokenizer = build_tiny_model({"seed": 3, "max_position_embeddings": 256})
    model.eval()
    engine = Engine(model, tokenizer)
    prompts = [[5, 6, 7], [20, 21, 22, 23, 24, 25, 26], [5, 6, 7], [40, 41, 42, 43, 44], [20, 21, 22, 23, 24, 25, 26]]
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    collected = [Collected() for _ in prompts]
    engine.start()
    try:
        with engine._wake:  # the scheduler admits nothing until every request is queued (the condition's lock is reentrant)
            for prompt, sink in zip(prompts, collected):
                engine.submit(GenerationRequest(prompt_ids=prompt, params=greedy, on_event=sink))
        assert all(sink.done.wait(HANG_S) for sink in collected)
    finally:
        engine.stop()
    assert engine.stats.requests == 5
    assert engine.stats.prefill_passes == 1, "the five requests admitted together are prefilled in one pass"
    assert engine.stats.prefills == 3, "one row per distinct prompt"
    for prompt, sink in zip(prompts, collected):
        assert len(sink.token_ids) == 6
        assert sink.logprobs == pytest.approx(forward_logprobs(model, prompt, sink.token_ids), abs=1e-4)
    assert collected[0].token_ids == collected[2].token_ids, "the same prompt, greedy: the same answer"


def test_prefill_chunks_keep_each_pass_within_the_token_budget() -> None:
    def request(length: int) -> GenerationRequest:
        return GenerationRequest(prompt_ids=[1] * length, params=SamplingParams(max_tokens=1), on_event=lambda _: None)

    short = [request(10) for _ in range(5)]
    huge = request(PREFILL_TOKEN_BUDGET)
    chunks = _prefill_chunks([*short, huge, *short])
    assert [len(chunk) for chunk in chunks] == [5, 1, 5]
    for chunk in chunks:
        assert len(chunk) == 1 or len(chunk) * max(len(r.prompt_ids) for r in chunk) <= PREFILL_TOKEN_BUDGET
    assert _prefill_chunks([]) == []
