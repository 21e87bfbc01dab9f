"""A tiny causal LM and its tokenizer, built locally from a config (no download), deterministic from a seed.

The tokenizer is byte-level (every UTF-8 byte is one token, so any text encodes and
decodes exactly) plus ChatML special tokens, with a ChatML chat template that
renders tools and Hermes-style ``<tool_call>`` blocks, and every role's content either as a
string or as a list of parts (the OpenAI form vLLM passes to templates). The model is a randomly
initialised Qwen2 or Llama with a few layers: the stand-in for a real checkpoint in
tests, benchmarks and the CPU training recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from v1.config import TinyModelConfig

PAD_TOKEN = "<|endoftext|>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, TURN_START, TURN_END]

CHAT_TEMPLATE = """\
{%- macro text_of(content) -%}
  {%- if content is string -%}{{- content -}}
  {%- elif content -%}
    {%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(system=none) -%}
{%- if messages and messages[0].role == 'system' -%}{%- set ns.system = text_of(messages[0].content) -%}{%- endif -%}
{%- if tools -%}
  {{- '<|im_start|>system\\n' -}}
  {%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}
  {{- '# Tools\\n' -}}
  {%- for tool in tools -%}{{- tool | tojson -}}{{- '\\n' -}}{%- endfor -%}
  {{- 'Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\\n' -}}
{%- elif ns.system is not none -%}
  {{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- if not (loop.first and message.role == 'system') -%}
    {{- '<|im_start|>' + message.role + '\\n' -}}
    {{- text_of(message.content) -}}
    {%- for call in message.tool_calls or [] -%}
      {{- '<tool_call>{"name": "' + call.function.name + '", "arguments": ' -}}
      {%- if call.function.arguments is string -%}{{- call.function.arguments -}}
      {%- else -%}{{- call.function.arguments | tojson -}}{%- endif -%}
      {{- '}</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""


def byte_symbols() -> dict[int, str]:
    """The byte-level pre-tokenizer's printable stand-in for each byte (GPT-2's table): token id = byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in symbols:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


def filler_tokens(count: int, symbols: dict[int, str]) -> list[str]:
    """`count` distinct tokens of 2 or 3 byte symbols each (none a single byte's), in a fixed order."""
    fillers = []
    for index in range(count):
        digits = [index // 256 % 256, index % 256] if index < 65536 else [index // 65536 % 256, index // 256 % 256, index % 256]
        fillers.append("".join(symbols[digit] for digit in digits))
    return fillers


def build_tiny_tokenizer(vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """The byte-level ChatML tokenizer: 256 byte tokens (id = byte value), then `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`.

    Args:
        vocab_size: pad the vocabulary to this size with filler tokens between the bytes and the
            special tokens (which then take the last three ids); encoding never produces a filler.
    """
    symbols = byte_symbols()
    vocab = {symbol: byte for byte, symbol in symbols.items()}
    if vocab_size is not None:
        if not len(vocab) + len(SPECIAL_TOKENS) <= vocab_size <= 16_000_000:
            raise ValueError(f"vocab_size must be in [{len(vocab) + len(SPECIAL_TOKENS)}, 16000000], not {vocab_size}")
        fillers = filler_tokens(vocab_size - len(vocab) - len(SPECIAL_TOKENS), symbols)
        vocab |= {token: len(vocab) + index for index, token in enumerate(fillers)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=TURN_END,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 30,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(config: TinyModelConfig | dict[str, Any] | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A randomly initialised causal LM and its tokenizer, deterministic from `config.seed`.

    Args:
        config: a `TinyModelConfig` (or its fields as a dict, bounded to tiny); defaults build a ~150k-parameter Qwen2.
    """
    config = config if isinstance(config, TinyModelConfig) else TinyModelConfig(config)
    tokenizer = build_tiny_tokenizer(config.vocab_size)
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": None,
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model: PreTrainedModel = (
            Qwen2ForCausalLM(Qwen2Config(**fields)) if config.architecture == "qwen2" else LlamaForCausalLM(LlamaConfig(**fields))
        )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer


def save_tiny_model(config: TinyModelConfig | dict[str, Any] | None, path: str | Path) -> Path:
    """Build the tiny model and save it and its tokenizer with `save_pretrained`, so `from_pretrained(path)` loads both."""
    model, tokenizer = build_tiny_model(config)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


__all__ = ["CHAT_TEMPLATE", "build_tiny_model", "build_tiny_tokenizer", "save_tiny_model"]
