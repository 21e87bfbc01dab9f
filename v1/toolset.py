"""`Toolset`: plain Python callables as tools the model can call.

Schemas come from signatures and type hints (pydantic builds the JSON schema:
`Literal`, `Optional`, lists and pydantic models included) and from the
docstring's argument descriptions. Calls validate the model's JSON arguments
first, so a bad call returns a readable tool error instead of crashing.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docstring_parser
from pydantic import ConfigDict, Field, ValidationError, create_model

from v1.calling import call_user_code
from v1.config import ToolsetConfig, resolve_callable
from v1.errors import ConfigError
from v1.types import Tool


def default_error_formatter(error: BaseException) -> str:
    return f"Error: {type(error).__name__}: {error}"


@dataclass
class ToolFunction:
    """One callable tool: its `Tool` definition and an argument validator."""

    fn: Callable[..., Any]
    tool: Tool
    arguments_model: type[Any]

    @classmethod
    def from_callable(cls, fn: Callable[..., Any]) -> ToolFunction:
        name = getattr(fn, "__name__", None)
        if not name or name == "<lambda>":
            raise ConfigError(f"tool {fn!r}: a tool needs a named function (its name is the tool's name)")
        docs = docstring_parser.parse(inspect.getdoc(fn) or "")
        descriptions = {param.arg_name: param.description for param in docs.params}
        signature = inspect.signature(fn)
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception as exc:
            raise ConfigError(f"tool {name!r}: cannot resolve its type hints ({exc})") from None
        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {name!r}: *args/**kwargs can't be described to a model; name each argument")
            annotation = hints.get(param.name, Any)
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        description = "\n\n".join(part for part in (docs.short_description, docs.long_description) if part)
        return cls(fn=fn, tool=Tool(name=name, description=description, parameters=schema), arguments_model=model)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The model's arguments checked against the schema (raises pydantic's `ValidationError`)."""
        validated = self.arguments_model.model_validate(arguments)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def __call__(self, **arguments: Any) -> Any:
        return await call_user_code(self.fn, **self.validate(arguments))


def render_tool_result(result: Any) -> str:
    """A tool's return value as tool-message content."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return str(result)


class Toolset:
    """A set of Python tools.

    Args:
        tools: sync or async callables (or `module:object` references to them).
        error_formatter: turns a tool's exception into the tool message the model sees.
        stop_errors: exception types that end the rollout instead of being shown to the model.
        config: a `ToolsetConfig` (or mapping), e.g. from TOML.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | str] = (),
        *,
        error_formatter: Callable[[BaseException], str] = default_error_formatter,
        stop_errors: Iterable[type[BaseException]] = (),
        config: ToolsetConfig | Mapping[str, object] | None = None,
    ) -> None:
        self.config = ToolsetConfig.from_config(config)
        entries = list(self.config.tools) + list(tools)
        self.error_formatter = error_formatter
        self.stop_errors = tuple(stop_errors)
        self.functions: dict[str, ToolFunction] = {}
        for i, entry in enumerate(entries):
            function = ToolFunction.from_callable(resolve_callable(entry, f"tools[{i}]"))
            if function.tool.name in self.functions:
                raise ConfigError(f"two tools are named {function.tool.name!r} in one toolset")
            self.functions[function.tool.name] = function

    @property
    def tools(self) -> list[Tool]:
        return [function.tool for function in self.functions.values()]

    async def call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Run one tool call and return the tool message content.

        Unknown tools, arguments that are not JSON or don't match the schema, and
        exceptions (other than `stop_errors`) all come back as readable errors.
        """
        function = self.functions.get(name)
        if function is None:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(sorted(self.functions)) or 'none'}"
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments or "{}")
            except ValueError as exc:
                return f"Error: the arguments for {name!r} are not valid JSON ({exc}); send a JSON object"
        else:
            parsed = dict(arguments)
        if not isinstance(parsed, dict):
            return f"Error: the arguments for {name!r} must be a JSON object, got {type(parsed).__name__}"
        try:
            kwargs = function.validate(parsed)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return f"Error: invalid arguments for {name!r}: {problems}"
        try:
            result = await call_user_code(function.fn, **kwargs)
        except self.stop_errors:
            raise
        except Exception as exc:
            return self.error_formatter(exc)
        return render_tool_result(result)


def merge_toolsets(toolsets: Iterable[Toolset]) -> dict[str, Toolset]:
    """Tool name -> owning toolset; a name defined twice is a `ConfigError`."""
    owners: dict[str, Toolset] = {}
    for toolset in toolsets:
        for name in toolset.functions:
            if name in owners:
                raise ConfigError(f"tool {name!r} is defined by two toolsets; tool names must be unique in a rollout")
            owners[name] = toolset
    return owners


__all__ = ["ToolFunction", "Toolset", "default_error_formatter", "merge_toolsets", "render_tool_result"]
