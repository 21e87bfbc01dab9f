"""Tool calls a model writes as text: Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks.

The format of the Qwen2/2.5/3 and Hermes chat templates (and of `v1.inference`'s tiny
model). Used where v1 itself turns generated text into tool calls: the built-in
inference server and the `renderer` client.
"""

from __future__ import annotations

import json
import re
from typing import Any

from v1._util.entropy import token_hex

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The text without its tool-call blocks, and the calls in OpenAI's shape.

    A block that is not ``{"name": str, "arguments": ...}`` JSON stays in the text; when
    no block parses, the text comes back unchanged with no calls.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in TOOL_CALL.finditer(text):
        try:
            payload = json.loads(match.group(1))
            name = payload["name"]
            arguments = payload.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            continue
        if not isinstance(name, str):
            continue
        kept.append(text[last : match.start()])
        last = match.end()
        calls.append(
            {
                "id": f"call_{token_hex(8)}",
                "type": "function",
                "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)},
            }
        )
    if not calls:
        return text, []
    kept.append(text[last:])
    rest = "".join(kept).strip()
    return rest or None, calls


__all__ = ["parse_tool_calls"]
