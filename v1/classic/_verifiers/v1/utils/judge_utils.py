"""``verifiers.v1.utils.judge_utils``: reading a judge's JSON verdict and keeping what it is shown short.

verifiers' self-judging v1 environments (``hello_self_judge_v1``, ``hello_parallel_sandbox_v1``)
import these four helpers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

TEXT_LIMIT = 6_000
COMMAND_LIMIT = 2_000


def parse_judge_json(text: str) -> dict[str, Any]:
    """The JSON object in a judge's answer: the whole text, else its outermost ``{...}``; a zero verdict otherwise."""
    start, end = text.find("{"), text.rfind("}")
    for candidate in (text, text[start : end + 1] if 0 <= start < end else ""):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {"score": 0.0, "reason": "judge did not return JSON", "raw": text}


def clamp_float(value: object) -> float:
    """`value` as a number in [0, 1]; 0.0 for anything that is not a finite number (a bool, None, a word)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0.0
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return min(1.0, max(0.0, number)) if math.isfinite(number) else 0.0


def truncate_text(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text`, cut to `limit` characters with a marker when longer."""
    return text if len(text) <= limit else text[:limit] + "\n...<truncated>"


def truncate_command_record(record: object) -> object:
    """A command record (``command``, ``stdout``, ``stderr``, ...) with those three texts cut short; anything else as is."""
    if not isinstance(record, Mapping):
        return record
    return {
        **dict(record),
        "command": truncate_text(str(record.get("command") or ""), COMMAND_LIMIT),
        "stdout": truncate_text(str(record.get("stdout") or "")),
        "stderr": truncate_text(str(record.get("stderr") or "")),
    }


__all__ = ["clamp_float", "parse_judge_json", "truncate_command_record", "truncate_text"]
