"""`Toolset`: the tools of a task's action space, and what they privately depend on.

A toolset holds Python callables (`ToolFunction`, v1/tools/_tool_function.py) and MCP servers
(`MCPTool`). `bindings` (v1/rollout/_bindings.py) fill hidden arguments the model never sees;
`objects` are private factories built lazily once per scope (v1/tools/_scopes.py: `rollout`,
`group`, `global`) and closed exactly once when the scope ends. `BoundTool` is one tool
bound to one rollout.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from v1._util.calling import call_user_code
from v1.config import HandlerLike, MCPToolConfig, SandboxConfig, SharedSandboxLike, ToolScope, ToolsetConfig, resolve_callable
from v1.errors import ConfigError, NotSupportedError
from v1.rollout import Binding, BindingContext, Handler, owned_handlers
from v1.tools._mcp import MCPConnection, MCPTool, mcp_result_content, mcp_result_value
from v1.tools._scopes import ScopedOwner, build_object_factories
from v1.tools._tool_function import (
    ToolFunction,
    default_error_formatter,
    invalid_arguments_message,
    parse_tool_arguments,
    render_tool_result,
)
from v1.types import Tool, ToolContent

if TYPE_CHECKING:
    from v1.rollout import State

RESERVED_TOOLSET_NAMES = ("show", "hide")


class Toolset(ScopedOwner):
    """A set of tools: Python callables and MCP servers, with bindings, objects and a scope.

    Args:
        tools: sync or async callables, `MCPTool`s, or `module:object` references / `MCPToolConfig` mappings.
        show, hide: the tools of this toolset the model sees by default (names).
        bindings: ``{"tool.argument": source}``: hidden arguments filled from `task.*`,
            `state.*`, `objects.*`, `tools.*` paths or from a callable `(task, state)`.
        objects: ``{"name": factory}``: private dependencies, each built by calling its
            zero-argument factory (sync or async) lazily once per scope, and closed
            (`aclose()`/`close()`) exactly once when the scope ends.
        write: let bindings hand tools the live `state` (and live `state.*` values) instead of copies.
        scope: `rollout` (default), `group` or `global`: how long objects and MCP servers live.
        sandbox: a `SandboxConfig` (or mapping) the tools run in (a tool taking `sandbox` gets it),
            or `"program"` to share the program's sandbox.
        stops, setups, updates, cleanups, teardowns: lifecycle handlers this toolset brings.
        config: a `ToolsetConfig` (or mapping); keyword arguments add to it.
        name: the toolset's name, for task visibility (``{"toolsets": {"show": [name]}}``).
        error_formatter: turns a tool's exception into the tool message the model sees.
        stop_errors: exception types that end the rollout instead of being shown to the model.
    """

    def __init__(
        self,
        tools: Iterable[Callable[..., Any] | MCPTool | str | Mapping[str, Any]] = (),
        *,
        show: Iterable[str] | None = None,
        hide: Iterable[str] | None = None,
        bindings: Mapping[str, Any] | None = None,
        objects: Mapping[str, Callable[[], Any] | str] | None = None,
        write: bool | None = None,
        scope: ToolScope | None = None,
        sandbox: SharedSandboxLike | None = None,
        stops: Iterable[HandlerLike] = (),
        setups: Iterable[HandlerLike] = (),
        updates: Iterable[HandlerLike] = (),
        cleanups: Iterable[HandlerLike] = (),
        teardowns: Iterable[HandlerLike] = (),
        config: ToolsetConfig | Mapping[str, object] | None = None,
        name: str | None = None,
        error_formatter: Callable[[BaseException], str] = default_error_formatter,
        stop_errors: Iterable[type[BaseException]] = (),
    ) -> None:
        super().__init__()
        self.config = ToolsetConfig.from_config(config)
        self.sandbox = sandbox_setting(sandbox if sandbox is not None else self.config.sandbox, "Toolset(sandbox=...)")
        self.name: str | None = name or self.config.name or (type(self).__name__ if type(self) is not Toolset else None)
        if self.name in RESERVED_TOOLSET_NAMES:
            raise ConfigError(f"a toolset can't be named {self.name!r} (reserved for visibility)")
        self.scope = scope or self.config.scope or "rollout"
        self.write = bool(write) if write is not None else self.config.write
        self.error_formatter = error_formatter
        self.stop_errors = tuple(stop_errors)
        self.object_factories = build_object_factories({**self.config.objects, **dict(objects or {})}, self.describe())
        self.bindings = self._parse_bindings({**self.config.bindings, **dict(bindings or {})})
        self.functions: dict[str, ToolFunction] = {}
        self.mcp_tools: list[MCPTool] = []
        for i, entry in enumerate(list(self.config.tools) + list(tools)):
            self._add_tool(entry, f"tools[{i}]")
        self._check_bindings()
        if self.sandbox is not None and self.mcp_tools:
            raise NotSupportedError(f"{self.describe()}: MCP servers of a sandboxed toolset can't run in its sandbox yet")
        self.show = list(show) if show is not None else self.config.show
        self.hide = list(hide) if hide is not None else self.config.hide
        self._check_visibility()
        lists = {"stops": stops, "setups": setups, "updates": updates, "cleanups": cleanups, "teardowns": teardowns}
        self.handlers: list[Handler] = owned_handlers(self, self.config, lists, self.describe())

    def describe(self) -> str:
        return f"toolset {self.name!r}" if self.name else "toolset"

    def _parse_bindings(self, sources: Mapping[str, Any]) -> dict[str, dict[str, Binding]]:
        """``{"tool.argument": source}`` as ``{tool: {argument: Binding}}``."""
        bindings: dict[str, dict[str, Binding]] = {}
        for key, source in sources.items():
            tool_name, _, argument = key.rpartition(".")
            if not tool_name or not argument:
                raise ConfigError(f"binding {key!r}: bindings of a toolset are keyed 'tool.argument'")
            bindings.setdefault(tool_name, {})[argument] = Binding(key, source, write=self.write)
        return bindings

    def _add_tool(self, entry: Any, where: str) -> None:
        """Add one entry of `tools`: an MCP server, or a callable (or reference) described by its signature."""
        if isinstance(entry, (MCPTool, MCPToolConfig)) or (isinstance(entry, Mapping) and not callable(entry)):
            self.mcp_tools.append(entry if isinstance(entry, MCPTool) else MCPTool(config=entry))  # type: ignore[arg-type]
            return
        fn = resolve_callable(entry, where)
        fn_name = getattr(fn, "__name__", None) or ""
        if self.sandbox is not None and _takes(fn, "sandbox") and "sandbox" not in self.bindings.get(fn_name, {}):
            self.bindings.setdefault(fn_name, {})["sandbox"] = Binding(f"{fn_name}.sandbox", self._rollout_sandbox)
        if _takes(fn, "state") and "state" not in self.bindings.get(fn_name, {}):
            self.bindings.setdefault(fn_name, {})["state"] = Binding(f"{fn_name}.state", _rollout_state)
        hidden = self.bindings.get(fn_name, {})
        function = ToolFunction.from_callable(fn, hidden)
        if function.tool.name in self.functions:
            raise ConfigError(f"two tools are named {function.tool.name!r} in one toolset")
        missing = [arg for arg in hidden if arg not in function.parameters]
        if missing:
            raise ConfigError(
                f"binding '{fn_name}.{missing[0]}': tool {fn_name!r} takes no argument {missing[0]!r}; "
                f"it takes {list(function.parameters)}"
            )
        self.functions[function.tool.name] = function

    def _check_bindings(self) -> None:
        """Every binding names a tool of this toolset and a path that resolves (MCP tools are checked once listed)."""
        tool_names = None if self.mcp_tools else list(self.functions)
        for tool_name, by_argument in self.bindings.items():
            if tool_name not in self.functions and not self.mcp_tools:
                raise ConfigError(
                    f"binding {next(iter(by_argument.values())).name!r}: this toolset has no tool {tool_name!r}; "
                    f"tools: {sorted(self.functions) or 'none'}"
                )
            for binding in by_argument.values():
                binding.check(self.object_factories, tool_names)

    def _check_visibility(self) -> None:
        for label, names in (("show", self.show), ("hide", self.hide)):
            unknown = sorted(set(names or []) - set(self.functions))
            if unknown and not self.mcp_tools:
                raise ConfigError(f"{self.describe()} {label}= names unknown tool(s) {unknown}; tools: {sorted(self.functions)}")

    async def _rollout_sandbox(self, state: State) -> Any:
        """This toolset's sandbox in the rollout of `state` (the program's for `sandbox="program"`)."""
        return await rollout_sandbox(state, self.sandbox)

    @property
    def tools(self) -> list[Tool]:
        """The Python tools' definitions (MCP tools are listed when their server starts)."""
        return [function.tool for function in self.functions.values()]

    def visible(self, name: str) -> bool:
        """Whether this toolset shows tool `name` by default (its `show`/`hide`)."""
        if self.show is not None and name not in self.show:
            return False
        return not (self.hide is not None and name in self.hide)

    async def call(self, name: str, arguments: str | Mapping[str, Any]) -> ToolContent:
        """Run one Python tool call outside a rollout and return the tool message content.

        Unknown tools, arguments that are not JSON or don't match the schema, and
        exceptions (other than `stop_errors`) all come back as readable errors.
        Bindings to `task`/`state` fail here (there is no rollout); objects use a
        scope of their own, closed by `aclose()`.
        """
        function = self.functions.get(name)
        if function is None:
            return f"Error: unknown tool {name!r}; available tools: {', '.join(sorted(self.functions)) or 'none'}"
        tool = BoundTool(name, self, function, None, BindingContext(None, None, self.open_scope("standalone")))
        return await tool.run(arguments)


class BoundTool:
    """One tool of one rollout: an awaitable callable with its bindings applied.

    `await tool(**arguments)` returns the tool's value (raising on errors);
    `await tool.run(json_arguments)` returns tool-message content and never raises
    (except for the toolset's `stop_errors`).
    """

    def __init__(
        self,
        name: str,
        toolset: Toolset,
        function: ToolFunction | None,
        connection: tuple[MCPConnection, Tool] | None,
        context: BindingContext,
    ) -> None:
        self.name = name
        self.toolset = toolset
        self.function = function
        self.connection = connection
        self.context = context
        self._definition: Tool | None = None

    @property
    def definition(self) -> Tool:
        """The tool as the model sees it: named as in this rollout, its bound arguments left out (made on first use)."""
        if self._definition is None:
            if self.function is not None:
                self._definition = self.function.tool.model_copy(update={"name": self.name})
            else:
                remote = self.connection[1]  # type: ignore[index]
                hidden = self.toolset.bindings.get(remote.name, {})
                self._definition = remote.model_copy(
                    update={"name": self.name, "parameters": _without(remote.parameters, hidden)}
                )
        return self._definition

    def definition_json(self) -> dict[str, Any]:
        """`definition.model_dump(exclude_none=True)`: this tool's entry in `state["tool_defs"]`, a value of its own."""
        if self._definition is None and self.function is not None:  # as nearly always: no copy of the `Tool` made
            return self.function.definition_json(self.name)
        return self.definition.model_dump(exclude_none=True)

    def __repr__(self) -> str:
        return f"<tool {self.name!r} of {self.toolset.describe()}>"

    async def _bound_arguments(self, tool_name: str) -> dict[str, Any]:
        return {
            argument: await binding.resolve(self.context)
            for argument, binding in self.toolset.bindings.get(tool_name, {}).items()
        }

    async def _invoke(
        self, arguments: Mapping[str, Any], validated: dict[str, Any] | None = None, injected: Mapping[str, Any] | None = None
    ) -> tuple[Any, bool]:
        """(result, is_mcp_result); a Python tool's arguments are validated unless `validated` is given, and
        `injected` values of its bound arguments win over their bindings."""
        if self.function is not None:
            kwargs = validated if validated is not None else self.function.validate(arguments)
            bound = self.toolset.bindings.get(self.function.tool.name)
            if bound:  # most tools have no hidden arguments: no coroutine to make and run
                kwargs.update(await self._bound_arguments(self.function.tool.name))
                kwargs.update({name: value for name, value in (injected or {}).items() if name in bound})
            return await call_user_code(self.function.fn, **kwargs), False
        connection, remote = self.connection  # type: ignore[misc]
        bound = await self._bound_arguments(remote.name)
        return await connection.call(remote.name, {**arguments, **bound}), True

    async def __call__(self, **arguments: Any) -> Any:
        result, is_mcp = await self._invoke(arguments)
        return mcp_result_value(result) if is_mcp else result

    async def run(self, arguments: str | Mapping[str, Any], injected: Mapping[str, Any] | None = None) -> ToolContent:
        """The tool-message content for one model tool call (`injected`: values of bound arguments for this call)."""
        parsed = parse_tool_arguments(self.name, arguments)
        if isinstance(parsed, str):
            return parsed
        validated = None
        if self.function is not None:
            try:
                validated = self.function.validate(parsed)
            except ValidationError as exc:
                return invalid_arguments_message(self.name, exc)
        try:
            result, is_mcp = await self._invoke(parsed, validated, injected)
        except self.toolset.stop_errors:
            raise
        except Exception as exc:
            return self.toolset.error_formatter(exc)
        return mcp_result_content(result) if is_mcp else render_tool_result(result)


def _takes(fn: Callable[..., Any], argument: str) -> bool:
    try:
        return argument in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _rollout_state(state: State) -> State:
    """A tool's own `state` argument: the framework hands it the rollout's live state, never the model."""
    return state


def sandbox_setting(value: Any, where: str) -> SandboxConfig | str | None:
    """A `sandbox=` value of a toolset or user: None, `"program"` (share the program's) or a `SandboxConfig`.

    Raises:
        ConfigError: anything else.
    """
    if value is None or isinstance(value, SandboxConfig):
        return value
    if value == "program":
        return "program"
    if isinstance(value, Mapping):
        return SandboxConfig.from_config(value)
    raise ConfigError(f"{where}: expected 'program', a SandboxConfig or a mapping of one, got {value!r}")


async def rollout_sandbox(state: State, setting: SandboxConfig | str | None) -> Any:
    """The sandbox `setting` names in the rollout of `state`.

    Raises:
        ConfigError: outside a rollout, or `"program"` when the program has no sandbox.
    """
    sandboxes = state.runtime.borrowed.get("sandbox") if setting == "program" else None
    sandboxes = sandboxes or state.runtime.sandboxes
    if sandboxes is None or setting is None:
        raise ConfigError("a sandboxed tool or user runs inside a rollout only")
    return await sandboxes.get(setting)


def _without(schema: Mapping[str, Any], bound: Iterable[str]) -> dict[str, Any]:
    """A JSON schema without the bound arguments (the model never sees them)."""
    bound = set(bound)
    if not bound:
        return dict(schema)
    stripped = dict(schema)
    stripped["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k not in bound}
    if "required" in schema:
        stripped["required"] = [name for name in schema["required"] if name not in bound]
    return stripped


def check_mcp_bindings(toolset: Toolset, listed: Mapping[str, Tool]) -> None:
    """Bindings of a toolset with MCP servers, checked once the servers listed their tools.

    Raises:
        ConfigError: naming the binding, for a tool the toolset does not have or an argument it does not take.
    """
    for tool_name, by_argument in toolset.bindings.items():
        if tool_name in toolset.functions:
            continue
        for argument, binding in by_argument.items():
            if tool_name not in listed:
                known = sorted([*toolset.functions, *listed])
                raise ConfigError(f"binding {binding.name!r}: this toolset has no tool {tool_name!r}; tools: {known}")
            properties = listed[tool_name].parameters.get("properties")
            if not isinstance(properties, Mapping) or argument not in properties:
                raise ConfigError(f"binding {binding.name!r}: MCP tool {tool_name!r} takes no argument {argument!r}")


def merge_toolsets(toolsets: Iterable[Toolset]) -> dict[str, Toolset]:
    """Python tool name -> owning toolset; a tool or toolset name defined twice is a `ConfigError`."""
    owners: dict[str, Toolset] = {}
    names: dict[str, Toolset] = {}
    for toolset in toolsets:
        if toolset.name is not None:
            if toolset.name in names and names[toolset.name] is not toolset:
                raise ConfigError(f"two toolsets are named {toolset.name!r}; toolset names must be unique in a rollout")
            names[toolset.name] = toolset
        for name in toolset.functions:
            if name in owners and owners[name] is not toolset:
                raise ConfigError(f"tool {name!r} is defined by two toolsets; tool names must be unique in a rollout")
            owners[name] = toolset
    return owners


ToolCallable = Callable[..., Awaitable[Any]]

__all__ = [
    "RESERVED_TOOLSET_NAMES",
    "BoundTool",
    "ToolCallable",
    "Toolset",
    "check_mcp_bindings",
    "merge_toolsets",
    "rollout_sandbox",
    "sandbox_setting",
]
