"""Responses tools that chat-style upstreams cannot express, translated or dropped (what Codex CLI sends).

- `function` tools pass as they are.
- `namespace` tools (a named group of function/custom tools) are flattened: each member becomes a
  function named `<namespace>__<name>`; a call of that name is rendered back as a `function_call`
  item with `namespace` and the member's own `name`.
- `custom` (freeform) tools become a function taking one string argument, `input`; a call is rendered
  back as a `custom_tool_call` item whose `input` is that string.
- hosted tools (`web_search`, `file_search`, `code_interpreter`, `image_generation`, `mcp`, ...)
  run on OpenAI's servers, which the upstream is not: they are dropped with a warning that the
  endpoint records on the step. A program's earlier calls of hosted tools (`web_search_call`
  items, ...) are dropped from its input the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from v1._util import bounded_json as _bounded_json
from v1.interception._dialect import BadRequest
from v1.types import Tool

NAMESPACE_SEPARATOR = "__"
HOSTED_CALL_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "tool_search_call",
        "tool_search_output",
    }
)
"""Input items recording calls of hosted tools: nothing an upstream model can be shown as its own call."""
CUSTOM_INPUT = "input"


@dataclass(frozen=True)
class ToolOrigin:
    """What a flat upstream tool name stands for in the program's request."""

    name: str
    namespace: str | None = None
    custom: bool = False


def flat_name(name: str, namespace: str | None) -> str:
    """The upstream name of tool `name` (of `namespace`, if any)."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def _function(entry: Mapping[str, Any], where: str, namespace: str | None) -> Tool:
    if not isinstance(entry.get("name"), str) or not entry["name"]:
        raise BadRequest(f"{where}.name must be a non-empty string", f"{where}.name")
    parameters = entry.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise BadRequest(f"{where}.parameters must be a JSON schema object", f"{where}.parameters")
    return Tool(
        name=flat_name(entry["name"], namespace),
        description=entry.get("description") or "",
        parameters=dict(parameters),
        strict=entry.get("strict"),
    )


def _custom(entry: Mapping[str, Any], where: str, namespace: str | None) -> Tool:
    if not isinstance(entry.get("name"), str) or not entry["name"]:
        raise BadRequest(f"{where}.name must be a non-empty string", f"{where}.name")
    described = entry.get("description") or ""
    fmt = entry.get("format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        described += f"\n\nThe input follows this {fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
    schema = {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's whole input, as free text."}},
        "required": [CUSTOM_INPUT],
        "additionalProperties": False,
    }
    return Tool(name=flat_name(entry["name"], namespace), description=described.strip(), parameters=schema)


def parse_tools(raw: Any, warnings: list[str]) -> tuple[list[Tool] | None, dict[str, ToolOrigin]]:
    """A Responses `tools` list as upstream tools plus what each flattened name stands for.

    Hosted tools are dropped, each with a line in `warnings`. Raises `BadRequest` for malformed entries.
    """
    if raw is None:
        return None, {}
    if not isinstance(raw, list):
        raise BadRequest("tools must be a list", "tools")
    tools: list[Tool] = []
    origins: dict[str, ToolOrigin] = {}

    def add(entry: Any, where: str, namespace: str | None) -> None:
        kind = entry.get("type") if isinstance(entry, Mapping) else None
        if not isinstance(kind, str):
            raise BadRequest(f"{where} must be a tool object with a 'type'", where)
        if kind == "function":
            tool = _function(entry, where, namespace)
        elif kind == "custom":
            tool = _custom(entry, where, namespace)
        elif kind == "namespace" and namespace is None:
            name = entry.get("name")
            if not isinstance(name, str) or not name or not isinstance(entry.get("tools"), list):
                raise BadRequest(f"{where}: a namespace tool needs a 'name' and a 'tools' list", where)
            for j, member in enumerate(entry["tools"]):
                add(member, f"{where}.tools[{j}]", name)
            return
        else:
            warnings.append(f"{where}: tool type {kind!r} dropped: it runs on the provider's servers, not the upstream model")
            return
        origins[tool.name] = ToolOrigin(entry["name"], namespace, custom=kind == "custom")
        tools.append(tool)

    for index, entry in enumerate(raw):
        add(entry, f"tools[{index}]", None)
    return tools or None, origins


def custom_arguments(text: Any) -> str:
    """A custom tool call's free-text input as the JSON arguments of its upstream function."""
    return json.dumps({CUSTOM_INPUT: text if isinstance(text, str) else ""})


def custom_input(arguments: str) -> str:
    """The free-text input back from the upstream function's JSON arguments (the raw text if they are not JSON)."""
    try:
        value = _bounded_json.loads(arguments or "{}", "custom tool input")
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return str(value[CUSTOM_INPUT])
    return arguments


def call_item(call_id: str, name: str, arguments: str, origins: Mapping[str, ToolOrigin], status: str) -> dict[str, Any]:
    """The output item for one upstream tool call: a `function_call` (namespaced or not) or a `custom_tool_call`."""
    origin = origins.get(name)
    if origin is not None and origin.custom:
        item: dict[str, Any] = {"type": "custom_tool_call", "id": f"ctc_{call_id}", "call_id": call_id}
        item.update(name=origin.name, input=custom_input(arguments), status=status)
    else:
        item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name, "arguments": arguments}
        item["status"] = status
    if origin is not None and origin.namespace is not None:
        item["namespace"] = origin.namespace
        item["name"] = origin.name
    return item


__all__ = [
    "HOSTED_CALL_ITEMS",
    "NAMESPACE_SEPARATOR",
    "ToolOrigin",
    "call_item",
    "custom_arguments",
    "custom_input",
    "flat_name",
    "parse_tools",
]
