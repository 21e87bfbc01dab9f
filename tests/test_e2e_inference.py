"""Harness rollouts against the built-in inference server: every exact-token client records prompts that extend exactly."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import v1 as vf
from v1.clients import RendererClient
from v1.inference import InferenceServer, save_tiny_model

TOKEN_CLIENT_TYPES = ["openai_chat_completions_token", "renderer", "nemorl_chat_completions"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model({"seed": 5, "max_position_embeddings": 512}, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
async def server(model_dir: Path) -> AsyncIterator[InferenceServer]:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    async with InferenceServer(model, tokenizer, model_name=str(model_dir), nemo_token_fields=True) as running:
        yield running


async def three_turns(task: vf.Task, state: vf.State) -> None:
    """A multi-turn program: asks, echoes the answer back, and asks again, twice."""
    client = state.get_client()
    messages: list[Any] = list(task["prompt"])
    for follow_up in ("and again", "once more", None):
        reply = await client.chat.completions.create(model="ignored", messages=messages)
        if follow_up is not None:
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": follow_up}]


def harness_for(server: InferenceServer, client_type: str, **sampling: Any) -> vf.Harness:
    return vf.Harness(
        program=three_turns,
        client=vf.ClientConfig(client_type=client_type, api_base_url=server.url, max_retries=0),
        model=server.model_name,
        sampling_args={"temperature": 0, "max_tokens": 7, **sampling},
    )


def forward_logprobs(server: InferenceServer, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    with torch.no_grad():
        logits = server.model(torch.tensor([prompt_ids + completion_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[len(prompt_ids) - 1 + i, token]) for i, token in enumerate(completion_ids)]


@pytest.mark.parametrize("client_type", TOKEN_CLIENT_TYPES)
async def test_multi_turn_rollout_records_prompts_that_extend_exactly(server: InferenceServer, client_type: str) -> None:
    state = await harness_for(server, client_type).run({"prompt": [{"role": "user", "content": "Reverse: abc"}]})
    assert state["error"] is None, state["error"]
    steps = state["trajectory"]
    assert len(steps) == 3 and all(step["tokens"] is not None for step in steps)
    for previous, step in itertools.pairwise(steps):
        before = previous["tokens"]["prompt_ids"] + previous["tokens"]["completion_ids"]
        assert step["tokens"]["prompt_ids"][: len(before)] == before
        assert len(step["tokens"]["prompt_ids"]) > len(before)
    last = steps[-1]["tokens"]
    assert len(last["completion_logprobs"]) == len(last["completion_ids"]) > 0
    assert last["completion_logprobs"] == pytest.approx(
        forward_logprobs(server, last["prompt_ids"], last["completion_ids"]), abs=1e-4
    )


async def test_renderer_keeps_sampled_tokens_a_retokenization_would_change(server: InferenceServer) -> None:
    """Sampled bytes that are not valid UTF-8 do not survive decode + encode; the renderer still extends exactly."""
    before = RendererClient.stats.extended
    harness = harness_for(server, "renderer", temperature=1.0, seed=11, max_tokens=12)
    state = await harness.run({"prompt": [{"role": "user", "content": "Say something"}]})
    assert state["error"] is None, state["error"]
    steps = state["trajectory"]
    for previous, step in itertools.pairwise(steps):
        before_ids = previous["tokens"]["prompt_ids"] + previous["tokens"]["completion_ids"]
        assert step["tokens"]["prompt_ids"][: len(before_ids)] == before_ids
    assert RendererClient.stats.extended - before == 2
    assert server.stats["prompt_tokens"] == sum(len(step["tokens"]["prompt_ids"]) for step in steps)
