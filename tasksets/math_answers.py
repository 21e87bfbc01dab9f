"""Math answer checking shared by `gsm8k` and `competition_math`: equivalence by `math-verify`."""

from __future__ import annotations

import logging
from typing import Any

from math_verify import parse, verify

import v1 as vf

MAX_ANSWER_CHARS = 500
"""Longer answers are wrong without parsing (sympy can take very long on hostile input)."""

# Timeouts are off (math-verify's use signal.alarm, which works on the main thread only, and rewards run in
# worker threads); math-verify warns about that on every call.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def final_answer(text: str) -> str:
    """The answer in a reply: the last ``\\boxed{}``, else what follows ``####``, else the text."""
    boxed = vf.extract_boxed_answer(text, strict=True)
    if boxed:
        return boxed
    hashed = vf.extract_hash_answer(text)
    return hashed if hashed is not None else text.strip()


def equivalent(answer: str, gold: str) -> bool:
    """Whether `answer` is mathematically the same as `gold` (``1/2`` and ``0.5``, ``\\frac{1}{2}``)."""
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return False
    if answer.strip() == gold.strip():
        return True
    wrap = lambda text: text if "$" in text or "\\(" in text else f"${text}$"  # noqa: E731
    gold_parsed = parse(wrap(gold), parsing_timeout=None)  # type: ignore[arg-type]
    answer_parsed = parse(wrap(answer), parsing_timeout=None)  # type: ignore[arg-type]
    return bool(gold_parsed and answer_parsed and verify(gold_parsed, answer_parsed, timeout_seconds=None))


PARSER = vf.MaybeThinkParser(final_answer)

gold = vf.answer_gold("\\boxed{{{answer}}}")
"""The gold solution of the math tasksets: the row's answer in ``\\boxed{}``."""


def correct_answer(completion: list[dict[str, Any]], answer: str) -> float:
    """1.0 when the final answer of the last assistant message equals `answer` (math equivalence)."""
    return float(equivalent(PARSER.parse_answer(completion) or "", str(answer)))


__all__ = ["MAX_ANSWER_CHARS", "PARSER", "correct_answer", "equivalent", "final_answer", "gold"]
