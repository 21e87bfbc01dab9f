"""The one reader of JSON that comes from outside: request bodies, tool-call arguments, saved result files.

`json.loads` alone accepts ``NaN``, ``Infinity`` and ``1e999`` (which becomes ``inf``),
and nests as deep as the interpreter's stack allows: a value nested 900 deep parses, then
overflows the stack of whatever walks it next; one nested 200,000 deep raises
`RecursionError`, which nothing expects. `loads` refuses all of these with one
`UnsafeJSONError` (a `ValueError` too, so existing ``except ValueError`` still holds):
at most `MAX_DEPTH` nested arrays and objects, finite numbers only, and, when asked,
at most ``max_bytes`` of text. `check_depth` applies the same depth limit to a value
that arrived already parsed (an SDK's dict, an MCP argument object).

`orjson` parses first, as it is several times faster. Its answer is used only where it is the
same as `json.loads`'s: a document it refuses (``NaN``, ``1e999``, a lone surrogate, a BOM) and
one with a run of 19 digits (orjson reads an integer beyond 64 bits as a float) go to `json.loads`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from v1.errors import Error

MAX_DEPTH = 128
"""Nested arrays and objects an outside JSON value may hold (the outermost counts as 1)."""
_CONTAINERS = (dict, list)
_WIDE_INT_DIGITS = 19  # orjson reads integers of up to 64 bits exactly, and all of 18 digits fit
_LONG_DIGITS = re.compile(rf"\d{{{_WIDE_INT_DIGITS}}}")
_SCAN_TABLE = bytes(ord("0") if code in b"0123456789" else ord("[") if code in b"[{" else ord(".") for code in range(256))
"""Digits to ``0``, ``[`` and ``{`` to ``[``, the rest to ``.``: one pass over bytes answers both `_scan`'s questions."""


class UnsafeJSONError(Error, ValueError):
    """Outside JSON that is not valid, or nested deeper, larger or with numbers wider than the limits allow."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnsafeJSONError(f"the number {text[:40]} is out of range (finite numbers only)")
    return value


def _no_constant(name: str) -> Any:
    raise UnsafeJSONError(f"{name} is not valid JSON (finite numbers only)")


def _nests_deeper(value: Any, max_depth: int) -> bool:
    """Whether `value` nests more than `max_depth` arrays and objects, walked level by level (no recursion)."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    for _ in range(max_depth):
        below: list[Any] = []
        for node in level:
            below.extend([item for item in (node.values() if isinstance(node, dict) else node) if isinstance(item, _CONTAINERS)])
        if not below:
            return False
        level = below
    return bool(level)


def check_depth(value: Any, what: str = "the JSON value", max_depth: int = MAX_DEPTH) -> Any:
    """`value` itself, when it nests at most `max_depth` arrays and objects.

    Raises:
        UnsafeJSONError: it nests deeper (named by `what`).
    """
    if _nests_deeper(value, max_depth):
        raise UnsafeJSONError(f"{what}: nested more than {max_depth} levels deep")
    return value


def _scan(text: str | bytes | bytearray) -> tuple[bool, int]:
    """Whether `text` has a run of digits wide enough for orjson to read it otherwise than `json.loads`, and its count of ``[`` and ``{``."""
    if isinstance(text, str):
        return _LONG_DIGITS.search(text) is not None, text.count("[") + text.count("{")
    scanned = text.translate(_SCAN_TABLE)  # one byte pass, several times a regex's speed, for both answers
    return b"0" * _WIDE_INT_DIGITS in scanned, scanned.count(b"[")


def _parse(text: str | bytes | bytearray, finite: bool, orjson_agrees: bool) -> Any:
    """`json.loads(text)` (finite numbers only when `finite`), by orjson when `orjson_agrees` and it accepts `text`."""
    if orjson_agrees:
        try:  # not contextlib.suppress: its object and two calls cost a fifth of a small body's read
            return orjson.loads(text)  # refuses non-finite numbers itself
        except orjson.JSONDecodeError:
            pass  # refused: json.loads decides, value or error, as before
    if finite:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    return json.loads(text)


def loads(
    text: str | bytes | bytearray,
    what: str = "the JSON value",
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
    finite: bool = True,
) -> Any:
    """`text` parsed as JSON within the limits (see the module docs).

    Args:
        text: the JSON document (UTF-8 when bytes).
        what: names the value in the error (``"the request body"``, ``"results.jsonl line 3"``).
        max_depth: the most nested arrays and objects.
        max_bytes: the longest document accepted; None for no size limit.
        finite: refuse ``NaN``, ``Infinity`` and numbers that overflow; False keeps them (a model
            server's answer, whose logprobs may be ``-Infinity``, is bounded in depth only).

    Raises:
        UnsafeJSONError: not JSON, too deep, too large, or a number that is not finite.
    """
    if max_bytes is not None and len(text) > max_bytes:
        raise UnsafeJSONError(f"{what}: larger than {max_bytes} bytes")
    wide_digits, openings = _scan(text)
    try:
        value = _parse(text, finite, orjson_agrees=not wide_digits)
    except UnsafeJSONError as exc:
        raise UnsafeJSONError(f"{what}: {exc}") from None
    except RecursionError:
        raise UnsafeJSONError(f"{what}: nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise UnsafeJSONError(f"{what}: not valid JSON ({exc})") from None
    if openings > max_depth:  # only then can it nest that deep: most documents skip the walk
        check_depth(value, what, max_depth)
    return value


def read_already(text: bytes, value: Any, what: str = "the JSON value", *, max_depth: int = MAX_DEPTH) -> Any:
    """`value`, which orjson read from `text` (`v1._util.json_check.compact_json_read`), within `loads`' limits.

    orjson wrote `text` from a value equal to `value`, so it holds no number `loads` refuses (orjson writes
    no ``NaN`` and no int wider than 64 bits): only the depth is left to check, as `loads` checks it.

    Raises:
        UnsafeJSONError: it nests deeper than `max_depth` (named by `what`).
    """
    if text.count(b"[") + text.count(b"{") > max_depth:
        check_depth(value, what, max_depth)
    return value


__all__ = ["MAX_DEPTH", "UnsafeJSONError", "check_depth", "loads", "read_already"]
