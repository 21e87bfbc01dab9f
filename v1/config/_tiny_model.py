"""The shape of a tiny model built from a config: validated without torch, so a bad shape is one line at once."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from v1.config._config import Config

MAX_TINY_PARAMETERS = 100_000_000
"""A tiny model is built in memory from a config: bounded, so a config can't ask for unbounded memory."""
TINY_VOCAB_SIZE = 259
"""256 bytes and 3 special tokens (`v1.inference.build_tiny_tokenizer`)."""


class TinyModelConfig(Config):
    """The shape of a tiny model built from scratch; the same config and seed build the same weights.

    In TOML, a `[tiny_model]` table (or the whole file) holds these fields.
    """

    max_parameters: ClassVar[int] = MAX_TINY_PARAMETERS
    """The bound `parameter_count` is checked against. Code that means a bigger model (the benchmark at
    Qwen2.5-0.5B's shape) subclasses with a larger one; a file, a row or a request can't choose the class."""

    architecture: Literal["qwen2", "llama"] = "qwen2"
    hidden_size: int = Field(64, ge=8, le=4096)
    intermediate_size: int = Field(128, ge=8, le=16384)
    num_hidden_layers: int = Field(2, ge=1, le=64)
    num_attention_heads: int = Field(4, ge=1, le=128)
    num_key_value_heads: int = Field(2, ge=1, le=128)
    max_position_embeddings: int = Field(1024, ge=16, le=131072)
    tie_word_embeddings: bool = True
    vocab_size: int | None = Field(None, ge=259)
    """A real model's vocabulary size (151,936 for Qwen2.5) instead of the byte tokenizer's 259: the
    tokenizer gains filler tokens (never produced by encoding; each decodes to 2-3 bytes) to fill it."""
    seed: int = 0

    @model_validator(mode="after")
    def _is_tiny(self) -> TinyModelConfig:
        if self.parameter_count() > self.max_parameters:
            raise ValueError(
                f"a model of about {self.parameter_count():,} parameters is not tiny (at most {self.max_parameters:,}); "
                "build a bigger one with transformers and load it from a folder"
            )
        return self

    def parameter_count(self) -> int:
        """About how many parameters the model has (embeddings, attention and MLP weights; norms left out)."""
        embeddings = (self.vocab_size or TINY_VOCAB_SIZE) * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        per_layer = 4 * self.hidden_size**2 + 3 * self.hidden_size * self.intermediate_size
        return embeddings + self.num_hidden_layers * per_layer
