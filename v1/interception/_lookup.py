"""The endpoint's dialects: each wire format by name (`v1.registry.DIALECTS`) and by route."""

from __future__ import annotations

from v1.interception import _chat_completions as chat_completions
from v1.interception._dialect import Dialect
from v1.registry import DIALECTS, DialectPart

DEFAULT_DIALECT: Dialect = chat_completions.DIALECT


def all_dialects() -> list[DialectPart]:
    """Every dialect the endpoint speaks: the built-ins, then those registered in code or by plugins."""
    return DIALECTS.values()


def dialect_for_path(path: str) -> DialectPart:
    """The dialect whose route `path` ends with, else the one whose own API root it is under (Gemini's
    ``/v1beta``); Chat Completions (the OpenAI error shape) when none is."""
    dialects = all_dialects()
    for dialect in dialects:
        match = dialect.path_pattern.search(path)
        if match is not None and match.end() == len(path):
            return dialect
    for dialect in dialects:
        if dialect.prefix != DEFAULT_DIALECT.prefix and f"{dialect.prefix}/" in path:
            return dialect
    return DEFAULT_DIALECT


__all__ = ["DEFAULT_DIALECT", "DIALECTS", "all_dialects", "dialect_for_path"]
