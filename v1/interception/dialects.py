"""The registry of the endpoint's dialects: each wire format by name and by route."""

from __future__ import annotations

from v1.interception import chat_completions, completions, gemini, messages, responses
from v1.interception.dialect import Dialect

DIALECTS: dict[str, Dialect] = {
    dialect.name: dialect
    for dialect in (chat_completions.DIALECT, completions.DIALECT, responses.DIALECT, messages.DIALECT, gemini.DIALECT)
}
"""Every dialect the endpoint speaks, by `Dialect.name`."""

DEFAULT_DIALECT = DIALECTS["chat_completions"]


def dialect_for_path(path: str) -> Dialect:
    """The dialect whose route `path` ends with, else the one whose own API root it is under (Gemini's
    ``/v1beta``); Chat Completions (the OpenAI error shape) when none is."""
    for dialect in DIALECTS.values():
        match = dialect.path_pattern.search(path)
        if match is not None and match.end() == len(path):
            return dialect
    for dialect in DIALECTS.values():
        if dialect.prefix != DEFAULT_DIALECT.prefix and f"{dialect.prefix}/" in path:
            return dialect
    return DEFAULT_DIALECT


__all__ = ["DEFAULT_DIALECT", "DIALECTS", "dialect_for_path"]
