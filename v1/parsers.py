"""Parsers: pull the answer out of a completion (XML fields, think blocks, ``\\boxed{}``, ``####``).

A parser's `parse_answer(completion)` reads the last assistant message; its
`get_format_reward_func()` is a ready-made reward (``rewards=[parser.get_format_reward_func()]``)
that scores how well the completion follows the parser's format.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any


def last_assistant_text(completion: Sequence[Mapping[str, Any]] | str | None) -> str | None:
    """The text of the last assistant message of `completion` (a string is returned as is; None when there is none)."""
    if completion is None or isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
            return content or ""
    return None


def extract_boxed_answer(text: str, strict: bool = False) -> str:
    """The contents of the last ``\\boxed{...}`` in `text` (nested braces kept).

    Args:
        text: the model's answer.
        strict: return "" when there is no ``\\boxed{}`` (default: `text` itself).
    """
    start = text.rfind("\\boxed{")
    if start < 0:
        return "" if strict else text
    depth, begin = 0, start + len("\\boxed{")
    for index in range(begin, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            if depth == 0:
                return text[begin:index].strip()
            depth -= 1
    return "" if strict else text


def extract_hash_answer(text: str) -> str | None:
    """What follows the last ``####`` (GSM8K's answer marker), stripped; None without one."""
    if "####" not in text:
        return None
    return text.rsplit("####", 1)[1].strip().replace(",", "")


class Parser:
    """Returns the text as is (after `extract_fn`).

    Args:
        extract_fn: applied to the text, e.g. `extract_boxed_answer`.
    """

    def __init__(self, extract_fn: Callable[[str], Any] = lambda text: text) -> None:
        self.extract_fn = extract_fn

    def parse(self, text: str) -> Any:
        return self.extract_fn(text)

    def parse_answer(self, completion: Sequence[Mapping[str, Any]] | str | None) -> str | None:
        """The answer in the last assistant message (None without one)."""
        text = last_assistant_text(completion)
        if text is None:
            return None
        answer = self.parse(text)
        return answer if answer is None or isinstance(answer, str) else str(answer)

    def format_score(self, text: str) -> float:
        """How well `text` follows this parser's format, 0..1 (the base parser: any non-empty text)."""
        return float(bool(text.strip()))

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward ``(completion) -> float``: the format score of the last assistant message."""

        def format_reward(completion: Any) -> float:
            text = last_assistant_text(completion)
            return 0.0 if text is None else self.format_score(text)

        return format_reward


def _think_split(text: str) -> tuple[str | None, str]:
    """(the think block or None, the rest), for text that may start with ``<think>...</think>``."""
    match = re.match(r"\s*(?:<think>)?(.*?)</think>(.*)", text, re.DOTALL)
    if match is None:
        return None, text
    return match.group(1), match.group(2)


class ThinkParser(Parser):
    """For models that always think: the answer is what follows ``</think>`` ("" without one)."""

    def parse(self, text: str) -> Any:
        thought, rest = _think_split(text)
        return self.extract_fn(rest.strip()) if thought is not None else ""

    def format_score(self, text: str) -> float:
        thought, rest = _think_split(text)
        return float(thought is not None and "<think>" not in rest and bool(rest.strip()))


class MaybeThinkParser(Parser):
    """For models that may or may not think: a leading think block, when present, is dropped."""

    def parse(self, text: str) -> Any:
        return self.extract_fn(_think_split(text)[1].strip())


class XMLParser(Parser):
    """Fields in XML tags, e.g. ``<reasoning>...</reasoning><answer>...</answer>``.

    Args:
        fields: field names; a tuple lists alternatives (``("code", "answer")`` accepts either tag),
            its first name being the field's canonical name.
        answer_field: the field `parse_answer` returns (any of a tuple's names stands for the tuple).
        extract_fn: applied to the answer field.
    """

    def __init__(
        self,
        fields: Sequence[str | tuple[str, ...]],
        answer_field: str = "answer",
        extract_fn: Callable[[str], Any] = lambda text: text,
    ) -> None:
        super().__init__(extract_fn)
        self.fields = [(field,) if isinstance(field, str) else tuple(field) for field in fields]
        if not self.fields or any(
            not names or not all(re.fullmatch(r"[A-Za-z_][\w-]*", n) for n in names) for names in self.fields
        ):
            raise ValueError(f"XMLParser fields must be tag names (or tuples of them), got {list(fields)!r}")
        self.answer_field = next((names[0] for names in self.fields if answer_field in names), answer_field)

    def get_fields(self) -> list[str]:
        """The canonical field names."""
        return [names[0] for names in self.fields]

    def parse(self, text: str) -> SimpleNamespace:
        """Each canonical field's last tagged value (stripped), or None when absent."""
        values: dict[str, str | None] = {}
        for names in self.fields:
            values[names[0]] = None
            for name in names:
                found = re.findall(rf"<{name}>\s*(.*?)\s*</{name}>", text, re.DOTALL)
                if found:
                    values[names[0]] = found[-1]
                    break
        return SimpleNamespace(**values)

    def parse_answer(self, completion: Sequence[Mapping[str, Any]] | str | None) -> str | None:
        text = last_assistant_text(completion)
        if text is None:
            return None
        value = getattr(self.parse(text), self.answer_field, None)
        return None if value is None else self.extract_fn(value)

    def format_score(self, text: str) -> float:
        """The share of fields present."""
        parsed = vars(self.parse(text))
        return sum(value is not None for value in parsed.values()) / len(parsed)

    def get_format_str(self) -> str:
        """The expected format, to put in a system prompt."""
        return "\n".join(f"<{names[0]}>\n...\n</{names[0]}>" for names in self.fields)

    def format(self, **values: Any) -> str:
        """`values` as tagged fields, in field order (unknown names raise `ValueError`)."""
        unknown = sorted(set(values) - {name for names in self.fields for name in names})
        if unknown:
            raise ValueError(f"XMLParser.format: unknown field {unknown[0]!r}; fields: {self.get_fields()}")
        parts = []
        for names in self.fields:
            for name in names:
                if name in values:
                    parts.append(f"<{name}>\n{values[name]}\n</{name}>")
                    break
        return "\n".join(parts)


__all__ = [
    "MaybeThinkParser",
    "Parser",
    "ThinkParser",
    "XMLParser",
    "extract_boxed_answer",
    "extract_hash_answer",
    "last_assistant_text",
]
