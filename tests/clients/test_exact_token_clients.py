"""The exact-token clients' pieces: bridging a turn's prompt ids, finding earlier turns, NeMo-RL's token fields, tool-call text."""

from __future__ import annotations

from typing import Any

import pytest

import v1 as vf
from v1.clients import parse_tool_calls, resolve_client
from v1.clients._nemorl_chat_completions import lift_token_fields, with_token_fields
from v1.clients._renderer import BridgeStats, RendererClient, bridge_prompt_ids, encode, prompt_ids_for, render_text
from v1.clients._token_history import previous_turn, same_messages
from v1.inference import build_tiny_tokenizer
from v1.testing import MockModelServer

TOKENIZER = build_tiny_tokenizer()
END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
START = TOKENIZER.convert_tokens_to_ids("<|im_start|>")
USER = [{"role": "user", "content": "hi"}]


def step(prompt: list[dict[str, Any]], content: str, completion_ids: list[int]) -> dict[str, Any]:
    prompt_ids = encode(TOKENIZER, render_text(TOKENIZER, prompt, None))
    return {
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": content}],
        "tokens": {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "completion_logprobs": [-1.0] * len(completion_ids),
        },
    }


def test_bridge_keeps_the_sampled_ids_and_tokenizes_only_what_follows() -> None:
    first = step(USER, "yo", [*encode(TOKENIZER, "yo"), END])
    messages = [*USER, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    ids = prompt_ids_for(TOKENIZER, messages, None, [first], stats := BridgeStats())
    before = first["tokens"]["prompt_ids"] + first["tokens"]["completion_ids"]
    assert ids[: len(before)] == before
    assert TOKENIZER.decode(ids[len(before) :]) == "\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"
    assert stats == BridgeStats(extended=1)


def test_bridge_closes_a_turn_whose_text_differs_from_the_sampled_tokens() -> None:
    """A special token sampled mid-answer is not in the content; the sampled ids stay, then the template's close."""
    sampled = [*encode(TOKENIZER, "a"), START, *encode(TOKENIZER, "b")]
    messages = [*USER, {"role": "assistant", "content": "ab"}, {"role": "user", "content": "next"}]
    first = step(USER, "ab", sampled)
    ids = bridge_prompt_ids(TOKENIZER, messages, None, USER, first["tokens"]["prompt_ids"], sampled)
    assert ids is not None
    before = first["tokens"]["prompt_ids"] + sampled
    assert ids[: len(before)] == before
    assert TOKENIZER.decode(ids[len(before) :]) == "<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_that_rewrites_the_previous_prompt_restarts_and_is_counted() -> None:
    """Tools added after the first turn change the system block: no extension, a fresh render, counted."""
    first = step(USER, "yo", encode(TOKENIZER, "yo"))
    messages = [*USER, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    stats = BridgeStats()
    ids = prompt_ids_for(TOKENIZER, messages, tools, [first], stats)
    assert ids == encode(TOKENIZER, render_text(TOKENIZER, messages, tools))
    assert stats == BridgeStats(restarted=1)


def test_previous_turn_matches_messages_as_a_template_sees_them() -> None:
    recorded = step(USER, "", encode(TOKENIZER, "x"))
    recorded["completion"][0]["tool_calls"] = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]
    echoed = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    messages = [*USER, echoed, {"role": "tool", "tool_call_id": "c", "content": "2"}]
    assert previous_turn([recorded], messages) is recorded
    assert (
        previous_turn([recorded], [*USER, {"role": "assistant", "content": "edited"}, {"role": "user", "content": "q"}]) is None
    )
    assert not same_messages(USER, [{"role": "user", "content": "hi", "tool_call_id": "x"}])


def test_nemorl_attaches_each_assistant_turns_ids_and_lifts_the_answers() -> None:
    first = step(USER, "yo", [1, 2])
    messages = [*USER, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    attached = with_token_fields(messages, [first])
    assert attached[1]["generation_token_ids"] == [1, 2] and attached[1]["prompt_token_ids"] == first["tokens"]["prompt_ids"]
    assert attached[1]["generation_log_probs"] == [-1.0, -1.0]
    assert "generation_token_ids" not in messages[1], "the prompt is not modified in place"
    assert with_token_fields(messages, []) == messages

    answer = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "z",
                    "prompt_token_ids": [5, 6],
                    "generation_token_ids": [7],
                    "generation_log_probs": [-0.5],
                }
            }
        ]
    }
    lifted = lift_token_fields(answer)
    assert lifted["prompt_token_ids"] == [5, 6] and lifted["choices"][0]["token_ids"] == [7]
    assert lifted["choices"][0]["logprobs"]["content"][0]["logprob"] == -0.5
    assert "generation_token_ids" not in lifted["choices"][0]["message"]


def test_tool_call_blocks_become_tool_calls() -> None:
    content, calls = parse_tool_calls('let me add <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
    assert content == "let me add"
    assert calls[0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert parse_tool_calls("<tool_call>not json</tool_call>") == ("<tool_call>not json</tool_call>", [])
    assert parse_tool_calls('<tool_call>{"name": 3}</tool_call>')[1] == []


async def test_renderer_refuses_upstreams_and_answers_without_token_ids() -> None:
    with MockModelServer() as mock:
        client = RendererClient(
            vf.ClientConfig(client_type="renderer", api_base_url=mock.url, max_retries=0), tokenizer=TOKENIZER
        )
        try:
            with pytest.raises(vf.ModelError, match="token-id prompts"):
                await client.get_response(USER, "m", {"max_tokens": 3})
            sent = {"prompt_ids": encode(TOKENIZER, render_text(TOKENIZER, USER, None)), "tools": False}
            with pytest.raises(vf.InvalidModelResponseError, match="without token_ids"):
                client.to_response({"choices": [{"text": "x", "finish_reason": "stop"}], "v1_renderer": sent})
            with pytest.raises(vf.InvalidModelResponseError, match="differ from the prompt ids sent"):
                client.to_response({"choices": [{"text": "x", "token_ids": [1], "prompt_token_ids": [9]}], "v1_renderer": sent})
        finally:
            await client.close()


async def test_renderer_with_an_unloadable_tokenizer_is_a_config_error(tmp_path: Any) -> None:
    client = await resolve_client(vf.ClientConfig(client_type="renderer", renderer_model_name=str(tmp_path / "missing")))
    with pytest.raises(vf.ConfigError, match="cannot load the tokenizer"):
        await client.get_response(USER, "m", {})
