"""The tiny model builder and `v1 serve`: deterministic local models, saved and loaded, served from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.tools.patience import HANG_S
from v1.cli import main
from v1.inference import build_tiny_model, build_tiny_tokenizer, save_tiny_model
from v1.inference._tiny import SPECIAL_TOKENS

ROOT = Path(__file__).resolve().parents[2]


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    first, _ = build_tiny_model({"seed": 3})
    again, _ = build_tiny_model({"seed": 3})
    other, _ = build_tiny_model({"seed": 4})
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    assert not torch.equal(first.state_dict()["model.embed_tokens.weight"], other.state_dict()["model.embed_tokens.weight"])


def test_a_real_vocabulary_size_pads_the_tokenizer_without_changing_what_text_encodes_to() -> None:
    small, padded = build_tiny_tokenizer(), build_tiny_tokenizer(vocab_size=1000)
    assert len(small) == 259 and len(padded) == 1000
    text = padded.apply_chat_template([{"role": "user", "content": "héllo, wörld"}], tokenize=False, add_generation_prompt=True)
    ids = padded.encode(text)
    special = {small.convert_tokens_to_ids(token): padded.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    assert ids == [special.get(token, token) for token in small.encode(text)], "bytes keep their ids; specials move to the end"
    assert sorted(special.values()) == [997, 998, 999]
    assert padded.decode(ids) == text
    assert padded.decode([256, 300]) == "\x00\x00\x00,", "a filler decodes to its bytes"
    model, tokenizer = build_tiny_model({"vocab_size": 1000, "hidden_size": 16, "intermediate_size": 16})
    assert model.config.vocab_size == len(tokenizer) == 1000
    assert model.config.eos_token_id == tokenizer.eos_token_id == 999
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_tokenizer(vocab_size=10)


def test_saved_model_and_tokenizer_load_with_from_pretrained(tmp_path: Path) -> None:
    model, tokenizer = build_tiny_model({"architecture": "llama", "num_hidden_layers": 1, "seed": 9})
    path = save_tiny_model({"architecture": "llama", "num_hidden_layers": 1, "seed": 9}, tmp_path / "m")
    loaded = AutoModelForCausalLM.from_pretrained(path)
    loaded_tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    text = "héllo <|im_start|>\n  wörld 日本"
    ids = loaded_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert loaded_tokenizer.decode(ids) == text, "byte-level: any text round-trips"
    assert loaded_tokenizer.eos_token == "<|im_end|>"


def test_chat_template_renders_system_tools_and_tool_calls() -> None:
    _, tokenizer = build_tiny_model()
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "add"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "2"},
    ]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nbe brief\n\n# Tools\n")
    assert '<|im_start|>assistant\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call><|im_end|>\n' in text
    assert text.endswith("<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n")


def as_parts(text: str) -> list[dict[str, str]]:
    """`text` as OpenAI content parts, split in two (and an image part the template skips)."""
    return [{"type": "text", "text": text[:2]}, {"type": "image_url", "image_url": "x"}, {"type": "text", "text": text[2:]}]


def test_chat_template_renders_list_of_parts_content_like_strings_for_every_role() -> None:
    _, tokenizer = build_tiny_model()
    roles = [("system", "be brief"), ("user", "add"), ("assistant", "3"), ("user", "again")]
    strings = [{"role": role, "content": text} for role, text in roles]
    parts = [{"role": role, "content": as_parts(text)} for role, text in roles]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    for extra in ({}, {"tools": tools}):
        as_text = tokenizer.apply_chat_template(strings, tokenize=False, add_generation_prompt=True, **extra)
        assert tokenizer.apply_chat_template(parts, tokenize=False, add_generation_prompt=True, **extra) == as_text
    assert as_text.startswith("<|im_start|>system\nbe brief\n\n# Tools\n")
    empty = tokenizer.apply_chat_template([{"role": "system", "content": []}, {"role": "user", "content": "x"}], tokenize=False)
    assert empty.startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx")


def test_bad_tiny_config_is_a_config_error() -> None:
    import v1 as vf

    with pytest.raises(vf.ConfigError, match="hidden_size"):
        build_tiny_model({"hidden_size": 2})
    with pytest.raises(vf.ConfigError, match="layers"):
        build_tiny_model({"layers": 2})


def test_serve_cli_serves_a_tiny_config(tmp_path: Path) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text("[tiny_model]\nhidden_size = 32\nseed = 2\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "serve", str(config), "--port", "0", "--nemo-token-fields"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving 'tiny' at http://127.0.0.1:"), line + (
            process.stderr.read() if process.poll() is not None else ""
        )
        url = line.split(" at ")[1].strip()
        with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
            answer = client.completions.create(model="tiny", prompt="hi", max_tokens=3, temperature=0)
            chat = client.chat.completions.with_raw_response.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            ).http_response.json()
        assert answer.usage is not None and answer.usage.completion_tokens == 3
        assert len(chat["choices"][0]["message"]["generation_token_ids"]) == 2, "--nemo-token-fields reached the server"
    finally:
        process.terminate()
        process.communicate(timeout=HANG_S)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.toml", None, "no such model directory or config file"),
        ("bad.toml", "[tiny_model]\nhidden_size = 'x'\n", "hidden_size"),
        ("bad.json", "{not json", "invalid JSON"),
        ("weights.bin", "", "expected a model directory, or a .toml/.json"),
        ("empty_dir", "", "not a model directory"),
    ],
)
def test_serve_cli_rejects_bad_sources_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | None, message: str
) -> None:
    source = tmp_path / name
    if name == "empty_dir":
        source.mkdir()
    elif content is not None:
        source.write_text(content)
    assert main(["serve", str(source), "--port", "0"]) == 2
    stderr = capsys.readouterr().err
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_import_v1_does_not_import_torch() -> None:
    code = "import sys, v1, v1.cli; heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--seed", "-1"], "--seed must be in 0..2**63-1, got -1"),
        (["--seed", str(2**63)], "--seed must be in 0..2**63-1"),
        (["--seed", "3", "--engine", "vllm"], "--seed is the builtin engine's"),
    ],
)
def test_serve_cli_rejects_bad_seeds_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text("[tiny_model]\nhidden_size = 32\n")
    assert main(["serve", str(config), "--port", "0", *options]) == 2
    stderr = capsys.readouterr().err
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr
