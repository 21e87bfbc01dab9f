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

from v1._util.message_text import last_assistant_text, message_text
from v1.types import ChatMessage, Messages


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
        **kwargs: kept as attributes of the parser (the older call form of seed 004).
    """

    def __init__(self, extract_fn: Callable[[str], Any] = lambda text: text, **kwargs: Any) -> None:
        if not callable(extract_fn):
            raise TypeError(f"{type(self).__name__}: extract_fn must be callable, got {type(extract_fn).__name__}")
        self.extract_fn = extract_fn
        for name, value in kwargs.items():
            setattr(self, name, value)

    def parse(self, text: str) -> Any:
        """`extract_fn` applied to `text`."""
        return self.extract_fn(text)

    def parse_answer(self, completion: Messages | None) -> str | None:
        """The answer in the last assistant message (None without one)."""
        text = last_assistant_text(completion)
        if text is None:
            return None
        answer = self.parse(text)
        return answer if answer is None or isinstance(answer, str) else str(answer)

    def get_assistant_messages(self, completion: Messages | None) -> list[ChatMessage]:
        """The assistant messages of `completion`, in order (a string completion is one assistant message)."""
        if completion is None:
            return []
        if isinstance(completion, str):
            return [{"role": "assistant", "content": completion}]
        return [dict(message) for message in completion if isinstance(message, Mapping) and message.get("role") == "assistant"]

    def format_score(self, text: str) -> float:
        """How well `text` follows this parser's format, 0..1 (the base parser: any non-empty text)."""
        return float(bool(text.strip()))

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward ``(completion, **kwargs) -> float``: the format score of the last assistant message."""

        def format_reward(completion: Any, **kwargs: Any) -> float:
            text = last_assistant_text(completion)
            return 0.0 if text is None else self.format_score(text)

        return format_reward


def _think_split(text: str) -> tuple[str | None, str]:
    """(the think block or None, the rest), for text that may start with ``<think>...</think>``."""
    end = text.find("</think>")
    if end < 0:
        return None, text
    thought = text[:end].lstrip()
    return thought.removeprefix("<think>"), text[end + len("</think>") :]


class ThinkParser(Parser):
    """For models that always think: the answer is what follows ``</think>`` ("" without one)."""

    def parse(self, text: str) -> Any:
        thought, rest = _think_split(text)
        return self.extract_fn(rest.strip()) if thought is not None else ""

    def format_score(self, text: str) -> float:
        thought, rest = _think_split(text)
        return float(thought is not None and "<think>" not in rest and "</think>" not in rest and bool(rest.strip()))


class MaybeThinkParser(Parser):
    """For models that may or may not think: a leading think block, when present, is dropped."""

    def parse(self, text: str) -> Any:
        return self.extract_fn(_think_split(text)[1].strip())


def _last_tagged(text: str, name: str) -> str | None:
    """The contents of the last closed ``<name>...</name>`` in `text` (the innermost one when nested), in linear time."""
    opening, closing = f"<{name}>", f"</{name}>"
    last_close = text.rfind(closing)
    if last_close < 0:
        return None
    start = text.rfind(opening, 0, last_close)
    if start < 0:
        return None
    begin = start + len(opening)
    return text[begin : text.find(closing, begin)]


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
        if isinstance(fields, str):
            raise ValueError(f"XMLParser fields must be a list of tag names, got the string {fields!r}")
        self.fields = [(field,) if isinstance(field, str) else tuple(field) for field in fields]
        if not self.fields or any(
            not names or not all(isinstance(n, str) and re.fullmatch(r"[A-Za-z_][\w-]*", n) for n in names)
            for names in self.fields
        ):
            raise ValueError(f"XMLParser fields must be tag names (or tuples of them), got {list(fields)!r}")
        self.answer_field = next((names[0] for names in self.fields if answer_field in names), answer_field)

    def get_fields(self) -> list[str]:
        """The canonical field names."""
        return [names[0] for names in self.fields]

    def parse(self, text: str, strip: bool = True) -> SimpleNamespace:
        """Each canonical field's last tagged value (stripped unless `strip=False`), or None when absent."""
        values: dict[str, str | None] = {}
        for names in self.fields:
            found = next((value for value in (_last_tagged(text, name) for name in names) if value is not None), None)
            values[names[0]] = found.strip() if found is not None and strip else found
        return SimpleNamespace(**values)

    def parse_answer(self, completion: Messages | None) -> str | None:
        """The answer field of the last assistant message that has one (None when none has it)."""
        for message in reversed(self.get_assistant_messages(completion)):
            text = message_text(message)
            value = getattr(self.parse(text), self.answer_field, None)
            if value is not None:
                return self.extract_fn(value)
        return None

    def format_score(self, text: str) -> float:
        """The share of fields present."""
        parsed = vars(self.parse(text))
        return sum(value is not None for value in parsed.values()) / len(parsed)

    def get_format_str(self) -> str:
        """The expected format, to put in a system prompt."""
        lines = []
        for names in self.fields:
            lines.append(f"<{names[0]}>\n...\n</{names[0]}>")
            if len(names) > 1:
                lines[-1] += f"  (or {', '.join(f'<{name}>' for name in names[1:])} in its place)"
        return "\n".join(lines)

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
]
