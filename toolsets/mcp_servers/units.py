"""A small real MCP server over stdio: unit conversion for lengths, masses and times.

It speaks MCP's JSON-RPC (one message per line on stdin/stdout) with the standard
library only, so it starts in a few milliseconds (the `mcp` SDK's server side takes
seconds to import); `toolsets.mcp_example` starts it for each rollout. Run as
`python toolsets/mcp_servers/units.py`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")

UNITS: dict[str, tuple[str, float]] = {
    "mm": ("length", 0.001),
    "cm": ("length", 0.01),
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "in": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "mi": ("length", 1609.344),
    "g": ("mass", 0.001),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "h": ("time", 3600.0),
}
"""Each unit's quantity and its size in the quantity's SI unit."""


class ToolFailure(Exception):
    """A tool's error, reported to the model as an error result."""


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    for unit in (from_unit, to_unit):
        if unit not in UNITS:
            raise ToolFailure(f"unknown unit {unit!r}; known units: {', '.join(UNITS)}")
    (source_kind, source_size), (target_kind, target_size) = UNITS[from_unit], UNITS[to_unit]
    if source_kind != target_kind:
        raise ToolFailure(f"cannot convert {source_kind} ({from_unit}) to {target_kind} ({to_unit})")
    return f"{value:g} {from_unit} = {value * source_size / target_size:.6g} {to_unit}"


def list_units() -> str:
    kinds: dict[str, list[str]] = {}
    for unit, (kind, _) in UNITS.items():
        kinds.setdefault(kind, []).append(unit)
    return "\n".join(f"{kind}: {', '.join(units)}" for kind, units in kinds.items())


UNIT = {"type": "string", "enum": list(UNITS)}
TOOLS: dict[str, tuple[Callable[..., str], dict[str, Any]]] = {
    "convert_units": (
        convert_units,
        {
            "description": "Convert a value from one unit to another of the same quantity (length, mass or time).",
            "inputSchema": {
                "type": "object",
                "properties": {"value": {"type": "number"}, "from_unit": UNIT, "to_unit": UNIT},
                "required": ["value", "from_unit", "to_unit"],
            },
        },
    ),
    "list_units": (
        list_units,
        {"description": "The units convert_units knows, by quantity.", "inputSchema": {"type": "object", "properties": {}}},
    ),
}


def call_tool(params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    try:
        if name not in TOOLS:
            raise ToolFailure(f"unknown tool {name!r}")
        text, error = TOOLS[name][0](**arguments), False
    except (ToolFailure, TypeError, ValueError) as exc:
        text, error = str(exc), True
    return {"content": [{"type": "text", "text": text}], "isError": error}


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one JSON-RPC message (None for notifications)."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        result: dict[str, Any] = {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "v1-units", "version": "1"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [{"name": name, **spec} for name, (_, spec) in TOOLS.items()]}
    elif method == "tools/call":
        result = call_tool(params)
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"unknown method {method!r}"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            response: dict[str, Any] | None = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
        else:
            response = answer(message) if isinstance(message, dict) else None
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
