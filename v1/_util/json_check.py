"""JSON as `json.dumps` sees it, answered quickly: whether a value is JSON (every rollout's state is checked
once), and a value's compact JSON text (every model call's bodies are written with it).

`json.dumps` of a whole state is most of what finalizing costs. orjson writes the same value in a
tenth of the time, but it accepts a few values `json.dumps` refuses (a `UUID`, an `Enum` member:
written as their value) and writes ``NaN`` as ``null``. So orjson answers only when reading its
output back gives a value equal to the input, which holds only for dicts, lists, strings, ints,
floats, booleans and None; any other answer, and any value orjson refuses, is decided by
`json.dumps` itself.

Whether a value is JSON needs no text read back: orjson refusing every subclass of a built-in type
(`PLAIN_TYPES_ONLY`) writes only dicts with string keys, lists, tuples, strings, ints, floats, booleans
and None, plus the three types `json.dumps` refuses (`UUID`, an `Enum` member, `orjson.Fragment`);
`marshal` writes none of those three (it takes built-in types only, never a subclass). A value both
write is one `json.dumps` writes (NaN needs no read-back here: `json.dumps` writes it by default). On a
single-turn rollout's state the two passes execute 62.5 k instructions, the text read back and compared
110.4 k: the read-back builds a copy of the whole value.

orjson (3.12 and later) returns its text in the buffer it wrote it into, never shrunk: at least 4 KiB,
and about ten times the text's length (a 20 KB body holds 260 KB). `compact_json`'s text is kept for
as long as a model call is in flight (the program's request, the upstream request), so it returns a
copy of its own length.
"""

from __future__ import annotations

import json
import marshal
from typing import Any

import orjson

PLAIN_TYPES_ONLY = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson's options that refuse every subclass of a built-in type, dataclass and datetime (see the module doc)."""


def _read_back(value: Any) -> tuple[bytes, Any] | None:
    """orjson's text of `value` and that text read back, when the reading equals `value` (so `json.dumps`
    writes the same value), else None."""
    try:
        text = orjson.dumps(value, option=PLAIN_TYPES_ONLY)
    except TypeError:  # orjson.JSONEncodeError included: a wide int, a lone surrogate, a non-str key, ...
        return None
    reading = orjson.loads(text)
    return (text, reading) if reading == value else None


def _orjson_text(value: Any) -> bytes | None:
    """orjson's text of `value` when reading it back gives `value` again (so `json.dumps` writes the same value), else None."""
    read = _read_back(value)
    return read[0] if read is not None else None


def _right_sized(text: bytes) -> bytes:
    """A copy of `text` that holds its own length, not the buffer orjson wrote it in (see the module doc)."""
    return b"".join((text, b""))  # two parts: joined into a new object (one would come back as it is)


def exact_json(value: Any) -> bytes | None:
    """`compact_json`'s text, sized to be kept, when `orjson.loads` of it gives `value` back as it is (not
    a tuple turned list, nor a float subclass turned float); else None."""
    text = _orjson_text(value)
    return _right_sized(text) if text is not None else None


def _json_dumps(value: Any, allow_nan: bool) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode()


def compact_json(value: Any, *, allow_nan: bool = True) -> bytes:
    """`json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)` as UTF-8: the same value.

    The text may differ where JSON allows (``1e-5`` for ``1e-05``); what `json.dumps` refuses, this refuses the same way.

    Raises:
        TypeError, ValueError, RecursionError, UnicodeEncodeError: as `json.dumps` and encoding its text raise them.
    """
    return compact_json_read(value, allow_nan=allow_nan)[0]


def compact_json_read(value: Any, *, allow_nan: bool = True) -> tuple[bytes, Any]:
    """`compact_json(value)` and the JSON value that text reads as, a value of its own (what `json.loads` of
    it gives), or None in its place where orjson did not write the text (a value `json.dumps` writes otherwise).

    Raises:
        TypeError, ValueError, RecursionError, UnicodeEncodeError: as `compact_json`.
    """
    read = _read_back(value)
    if read is not None:
        return _right_sized(read[0]), read[1]
    return _json_dumps(value, allow_nan), None


def compact_json_text(value: Any, *, allow_nan: bool = True) -> str:
    """`compact_json`'s text as a `str` (what `json.dumps(value, separators=(",", ":"), ensure_ascii=False)` returns).

    Raises:
        TypeError, ValueError, RecursionError, UnicodeEncodeError: as `compact_json`.
    """
    text = _orjson_text(value)
    if text is not None:
        return text.decode()  # a new str: orjson's buffer is not kept
    return _json_dumps(value, allow_nan).decode()


def is_json(value: Any) -> bool:
    """Whether `json.dumps(value)` succeeds."""
    try:
        orjson.dumps(value, option=PLAIN_TYPES_ONLY)
        marshal.dumps(value)
        return True
    except (TypeError, ValueError):  # not a plain type (see the module doc), too deep, ...: json.dumps decides
        pass
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


__all__ = ["PLAIN_TYPES_ONLY", "compact_json", "compact_json_read", "compact_json_text", "exact_json", "is_json"]
