"""One Python tool: its schema from the signature and docstring, argument checks, and result rendering.

Schemas come from signatures and type hints (pydantic builds the JSON schema: `Literal`,
`Optional`, lists and pydantic models included) and from the docstring's argument
descriptions; bound arguments are left out. Calls validate the model's JSON arguments
first, so a bad call returns a readable tool error instead of crashing.
"""

from __future__ import annotations

import copy
import inspect
import json
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import docstring_parser
import orjson
from pydantic import ConfigDict, Field, ValidationError, create_model

from v1._util import bounded_json as _bounded_json
from v1._util.calling import call_user_code
from v1._util.json_check import exact_json
from v1.errors import ConfigError
from v1.types import Tool


def default_error_formatter(error: BaseException) -> str:
    return f"Error: {type(error).__name__}: {error}"


@dataclass
class ToolFunction:
    """One callable tool: its `Tool` definition (bound arguments left out) and an argument validator."""

    fn: Callable[..., Any]
    tool: Tool
    arguments_model: type[Any]
    parameters: tuple[str, ...] = ()
    _definitions: dict[str, tuple[Tool, dict[str, Any], bytes]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_callable(cls, fn: Callable[..., Any], hidden: Iterable[str] = ()) -> ToolFunction:
        """Build from a named function; `hidden` arguments (bindings) are not in the schema."""
        name = getattr(fn, "__name__", None)
        if not name or name == "<lambda>":
            raise ConfigError(f"tool {fn!r}: a tool needs a named function (its name is the tool's name)")
        hidden = set(hidden)
        docs = docstring_parser.parse(inspect.getdoc(fn) or "")
        descriptions = {param.arg_name: param.description for param in docs.params}
        signature = inspect.signature(fn)
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {name!r}: *args/**kwargs can't be described to a model; name each argument")
        visible = [param for param in signature.parameters.values() if param.name not in hidden]
        hints = _resolve_hints(fn, name, [param.name for param in visible])
        fields: dict[str, Any] = {}
        for param in visible:
            annotation = hints.get(param.name, Any)
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        description = "\n\n".join(part for part in (docs.short_description, docs.long_description) if part)
        return cls(
            fn=fn,
            tool=Tool(name=name, description=description, parameters=schema),
            arguments_model=model,
            parameters=tuple(signature.parameters),
        )

    def definition_json(self, name: str) -> dict[str, Any]:
        """`tool.model_copy(update={"name": name}).model_dump(exclude_none=True)`, a new value each call.

        Every rollout lists its tools' definitions (`state["tool_defs"]`), so the dump is kept as JSON text
        and read again while `tool` is the same object with the same fields (a deep copy of them is kept to
        compare: a schema changed in place is dumped again).
        """
        tool = self.tool
        kept = self._definitions.get(name)
        if kept is not None and kept[0] is tool and kept[1] == tool.__dict__:
            return orjson.loads(kept[2])  # type: ignore[no-any-return]
        dumped = tool.model_copy(update={"name": name}).model_dump(exclude_none=True)
        text = exact_json(dumped)
        if text is not None:  # a schema holding a tuple or a float subclass is dumped each time
            self._definitions[name] = (tool, copy.deepcopy(tool.__dict__), text)
        return dumped

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The model's arguments checked against the schema (raises pydantic's `ValidationError`)."""
        validated = self.arguments_model.model_validate(arguments)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def __call__(self, **arguments: Any) -> Any:
        return await call_user_code(self.fn, **self.validate(arguments))


def _resolve_hints(fn: Callable[..., Any], name: str, parameters: list[str]) -> dict[str, Any]:
    """The type hints of `parameters` only: a bound argument's hint is never described, so it need not resolve."""
    annotations = inspect.get_annotations(fn)

    def described() -> None: ...

    described.__annotations__ = {param: annotations[param] for param in parameters if param in annotations}
    try:
        return typing.get_type_hints(described, globalns=getattr(inspect.unwrap(fn), "__globals__", {}), include_extras=True)
    except Exception as exc:
        raise ConfigError(f"tool {name!r}: cannot resolve its type hints ({exc})") from None


def render_tool_result(result: Any) -> str:
    """A tool's return value as tool-message content."""
    if isinstance(result, str):
        return result
    if type(result) is int:
        return str(result)  # what `json.dumps` writes for one, without its encoder
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return str(result)


def parse_tool_arguments(name: str, arguments: str | Mapping[str, Any]) -> dict[str, Any] | str:
    """The model's arguments as a dict, or a readable error message."""
    try:
        if isinstance(arguments, str):
            parsed = _bounded_json.loads(arguments or "{}", f"the arguments for {name!r}")
        else:
            parsed = _bounded_json.check_depth(dict(arguments), f"the arguments for {name!r}")
    except _bounded_json.UnsafeJSONError as exc:
        return f"Error: {exc}; send a JSON object"
    if not isinstance(parsed, dict):
        return f"Error: the arguments for {name!r} must be a JSON object, got {type(parsed).__name__}"
    return parsed


def invalid_arguments_message(name: str, error: ValidationError) -> str:
    problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors())
    return f"Error: invalid arguments for {name!r}: {problems}"


__all__ = [
    "ToolFunction",
    "default_error_formatter",
    "invalid_arguments_message",
    "parse_tool_arguments",
    "render_tool_result",
]
