"""Supervised samples: reference answers rendered with the chat template, or saved rollouts' recorded tokens.

Reference answers have no recorded tokens, so they are tokenized here (prompt through
the tokenizer's chat template with the generation prompt, then the answer and the end-of-turn
token); only the answer's tokens carry loss. Saved rollouts (``results.jsonl`` written with
their trajectories) keep the server's tokens and the same masking as RL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from v1._util import bounded_json as _bounded_json
from v1.errors import ConfigError
from v1.train._batch import Sample, samples_from_states


def answer_sample(tokenizer: Any, messages: list[dict[str, Any]], answer: str) -> Sample:
    """One sample: the chat-templated prompt (no loss), then `answer` + end of turn (loss)."""
    prompt_ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    answer_ids = [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]
    return Sample(
        prompt_ids + answer_ids,
        [0] * len(prompt_ids) + [1] * len(answer_ids),
        [0.0] * (len(prompt_ids) + len(answer_ids)),
        [0.0] * len(prompt_ids) + [1.0] * len(answer_ids),
    )


def samples_from_answers(tokenizer: Any, rows: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """A sample per row with an `answer`: its `prompt` (or `question`) and system prompt, then the answer."""
    samples = []
    for index, row in enumerate(rows):
        answer = row.get("answer")
        if not isinstance(answer, str):
            raise ConfigError(f"sft: row {index} has no string 'answer' to train on")
        prompt = row.get("prompt")
        messages = (
            list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt or row.get("question") or "")}]
        )
        system = row.get("system_prompt")
        if isinstance(system, str) and system:
            messages = [{"role": "system", "content": system}, *messages]
        samples.append(answer_sample(tokenizer, messages, answer))
    return samples


def samples_from_results(path: Path, min_reward: float | None = None) -> list[Sample]:
    """The recorded tokens of saved rollouts (`results.jsonl`), those with at least `min_reward` when given."""
    if not path.is_file():
        raise ConfigError(f"sft.data {path}: no such results file")
    outputs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            output = _bounded_json.loads(line, f"sft.data {path} line {number}")
        except _bounded_json.UnsafeJSONError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(output, dict):
            raise ConfigError(f"sft.data {path} line {number}: not a JSON object")
        if min_reward is None or float(output.get("reward") or 0.0) >= min_reward:
            outputs.append({**output, "advantage": 1.0})
    built = samples_from_states(outputs)
    if not built.samples:
        raise ConfigError(f"sft.data {path}: no rollout with recorded tokens (and enough reward) to train on")
    return built.samples


__all__ = ["answer_sample", "samples_from_answers", "samples_from_results"]
