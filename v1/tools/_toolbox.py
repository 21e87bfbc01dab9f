"""`RolloutToolbox`: the tools of one rollout, and the scopes it must close.

The harness builds one per rollout: it opens each visible toolset's scope
(starting MCP servers there), names the tools (an MCP tool whose name is
taken gets its server's name as a prefix), applies the task's visibility,
binds every tool to this rollout, and at the end closes what belongs to the
rollout (and to the group, when the rollout is a group of one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from v1._util.calling import call_user_code
from v1.errors import ConfigError, NotSupportedError, RolloutStopped, TaskError
from v1.interception import get_endpoint, upstream
from v1.rollout import BindingContext, NamedToolset, State
from v1.tools._scopes import Scope, ScopedOwner
from v1.tools._tool_function import ToolFunction, default_error_formatter, parse_tool_arguments, render_tool_result
from v1.tools._toolset import BoundTool, Toolset, check_mcp_bindings
from v1.types import ToolContent

if TYPE_CHECKING:
    from v1.rollout import Task


def _visibility(value: Any, field: str) -> tuple[list[str] | None, list[str] | None]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"task field {field!r}: expected {{'show': [...]}} or {{'hide': [...]}}, got {value!r}")
    unknown = sorted(set(value) - {"show", "hide"})
    if unknown:
        raise ConfigError(f"task field {field!r}: unknown key(s) {unknown}; use 'show' or 'hide'")
    show, hide = value.get("show"), value.get("hide")
    return (list(show) if show is not None else None), (list(hide) if hide is not None else None)


def _filter(names: list[str], show: list[str] | None, hide: list[str] | None, field: str, known: Iterable[str]) -> list[str]:
    unknown = sorted((set(show or []) | set(hide or [])) - set(known))
    if unknown:
        kind = "toolset" if field == "toolsets" else "tool"
        raise ConfigError(f"task field {field!r} names unknown {kind}(s) {unknown}; available: {sorted(known)}")
    if show is not None:
        names = [name for name in names if name in show]
    if hide is not None:
        names = [name for name in names if name not in hide]
    return names


def _refuse_hidden(show: list[str] | None, defaults: list[str], field: str) -> None:
    """A row narrows the tools its toolsets show: it can't show one they hide (its call would run)."""
    hidden = sorted(set(show or []) - set(defaults))
    if hidden:
        raise TaskError(
            f"task field {field!r}: {hidden!r:.200} hidden by the toolset; a row may hide tools, not show hidden ones; "
            "outside data narrows what the harness configured, never widens it"
        )


async def _call_plain(name: str, tool: Callable[..., Any], arguments: str | Mapping[str, Any]) -> ToolContent:
    parsed = parse_tool_arguments(name, arguments)
    if isinstance(parsed, str):
        return parsed
    try:
        return render_tool_result(await call_user_code(tool, **parsed))
    except Exception as exc:
        return default_error_formatter(exc)


def truncate_tool_output(content: ToolContent, limit: int) -> ToolContent:
    """`content` cut to `limit` characters of text, with a marker saying how much was cut.

    A text keeps its first and last halves (a command's errors and exit come last) around the
    marker. A multi-part result (text and images) keeps its parts in order until its text has
    used `limit` characters; the part that crosses is cut, later text parts are left out, and
    the marker follows. Images are kept.
    """
    if isinstance(content, str):
        if len(content) <= limit:
            return content
        head = limit - limit // 2
        return content[:head] + _marker(len(content) - limit, len(content)) + content[len(content) - limit // 2 :]
    texts = [part for part in content if part.get("type") == "text"]
    total = sum(len(str(part.get("text", ""))) for part in texts)
    if total <= limit:
        return content
    kept: list[dict[str, Any]] = []
    left = limit
    for part in content:
        if part.get("type") != "text":
            kept.append(part)
        elif left > 0:
            text = str(part.get("text", ""))
            kept.append({**part, "text": text[:left]})
            left -= min(left, len(text))
    kept.append({"type": "text", "text": _marker(total - limit, total)})
    return kept


def _marker(cut: int, total: int) -> str:
    return f"\n... [truncated {cut} of {total} characters] ...\n"


class RolloutToolbox:
    """The bound tools of one rollout and the scopes it opened.

    Args:
        state: the rollout's state.
        group_id: the rollout's group (None: a group of one, which this toolbox owns).
        max_output: characters of one tool result the model sees (`truncate_tool_output`); None: all of it.
    """

    def __init__(self, state: State, group_id: str | None = None, max_output: int | None = None) -> None:
        self.state = state
        self.max_output = max_output
        self.rollout_id: str = state["trajectory_id"]
        self.owns_group = group_id is None
        self.group_id = group_id or self.rollout_id
        self.tools: dict[str, BoundTool] = {}
        self.toolsets: list[Toolset] = []
        self._owners: list[tuple[ScopedOwner, str]] = []
        self._user_state: State | None = None
        self._user_lock: asyncio.Lock | None = None  # made by the first `user_client` call: few rollouts have a user

    def _scope(self, owner: ScopedOwner) -> Scope:
        key = owner.scope_key(self.rollout_id, self.group_id)
        if (owner, key) not in self._owners:
            self._owners.append((owner, key))
        return owner.open_scope(key)

    async def resolve(self, task: Task, toolsets: list[Toolset], user: ScopedOwner | None) -> None:
        """Open the visible toolsets' scopes and bind their tools; sets `runtime.tools` and `tool_defs`.

        Raises:
            ConfigError: the task's visibility names unknown toolsets or tools.
            ToolError: an MCP server failed to start.
        """
        state = self.state
        if not toolsets and user is None and task.get("toolsets") is None and task.get("tools") is None:
            self._resolve_without_tools(state)
            return
        if user is not None:
            self._scope(user)
        named = [toolset.name for toolset in toolsets if toolset.name is not None]
        chosen = list(toolsets)
        if task.get("toolsets") is not None:
            extra = sorted(set(task["toolsets"]) - {"show", "hide"}) if isinstance(task["toolsets"], Mapping) else []
            if extra:
                raise NotSupportedError(
                    f"task field 'toolsets': rollout-local toolset config ({extra}) is not supported yet; "
                    "use {'show': [...]} or {'hide': [...]}"
                )
            show, hide = _visibility(task["toolsets"], "toolsets")
            kept = _filter(named, show, hide, "toolsets", named)
            chosen = [t for t in toolsets if t.name in kept or (t.name is None and show is None)]
        self.toolsets = chosen
        scopes = [self._scope(toolset) for toolset in chosen]
        starts = [scope.start_mcp(t.mcp_tools) for t, scope in zip(chosen, scopes) if t.mcp_tools]
        if starts:  # gathering nothing would still cost the rollout a turn of the loop
            await asyncio.gather(*starts)
        taken = {name for toolset in toolsets for name in toolset.functions}
        by_toolset: dict[int, list[str]] = {}
        defaults: list[str] = []
        for toolset, scope in zip(chosen, scopes):
            context = BindingContext(task, state, scope, self.tools)
            names = by_toolset.setdefault(id(toolset), [])
            for name, function in toolset.functions.items():
                self.tools[name] = BoundTool(name, toolset, function, None, context)
                names.append(name)
                if toolset.visible(name):
                    defaults.append(name)
            if toolset.mcp_tools:
                check_mcp_bindings(toolset, {t.name: t for _, c in scope.connections for t in c.tools})
            for source, connection in scope.connections:
                for remote in connection.tools:
                    name = remote.name if remote.name not in taken else f"{source.name}_{remote.name}"
                    if name in taken:
                        raise ConfigError(
                            f"MCP tool {remote.name!r} of {source!r} collides with tool {name!r} even when prefixed"
                        )
                    taken.add(name)
                    self.tools[name] = BoundTool(name, toolset, None, (connection, remote), context)
                    names.append(name)
                    if toolset.visible(remote.name):
                        defaults.append(name)
        visible = self._task_visibility(task, defaults, by_toolset, chosen)
        borrowed = {name: tool for name, tool in state.runtime.tools.items() if name not in visible}
        for name in visible:
            state.runtime.tools.setdefault(name, self.tools[name])
        definitions = [self.tools[name].definition_json() for name in visible]
        definitions += [tool.definition_json() for tool in borrowed.values() if isinstance(tool, BoundTool)]
        state["tool_defs"] = definitions

    @staticmethod
    def _resolve_without_tools(state: State) -> None:
        """`resolve` when no toolset, no user and no visibility field take part: only a parent's
        borrowed tools are defined, and no scope is opened (the common case: one less walk per rollout)."""
        state["tool_defs"] = [tool.definition_json() for tool in state.runtime.tools.values() if isinstance(tool, BoundTool)]

    def _task_visibility(
        self, task: Task, defaults: list[str], by_toolset: dict[int, list[str]], chosen: list[Toolset]
    ) -> list[str]:
        visibility = task.get("tools")
        if visibility is None:
            return defaults
        if not isinstance(visibility, Mapping):
            raise ConfigError(f"task field 'tools': expected a mapping, got {visibility!r}")
        every = list(self.tools)
        if set(visibility) <= {"show", "hide"}:
            show, hide = _visibility(visibility, "tools")
            shown = _filter(every if show is not None else defaults, show, hide, "tools", every)
            _refuse_hidden(show, defaults, "tools.show")
            return shown
        visible = list(defaults)
        by_name = {toolset.name: toolset for toolset in chosen if toolset.name is not None}
        for toolset_name, rule in visibility.items():
            if toolset_name not in by_name:
                raise ConfigError(
                    f"task field 'tools.{toolset_name}': no visible toolset named {toolset_name!r}; toolsets: {sorted(by_name)}"
                )
            show, hide = _visibility(rule, f"tools.{toolset_name}")
            own = by_toolset[id(by_name[toolset_name])]
            kept = _filter(own, show, hide, f"tools.{toolset_name}", own)
            _refuse_hidden(show, defaults, f"tools.{toolset_name}.show")
            visible = [n for n in visible if n not in own] + kept
        return [name for name in every if name in visible]

    async def call(self, name: str, arguments: str | Mapping[str, Any], injected: Mapping[str, Any] | None = None) -> ToolContent:
        """One model tool call: a hidden or unknown tool is a tool error message, never a crash.

        Every path that shows a tool result to the model (the base loop, the classic `ToolEnv`,
        the endpoint's MCP route) calls here, so a result over `max_output` characters is cut
        here for all of them (`truncate_tool_output`).

        `injected`: values of a Python tool's hidden (bound) arguments for this call only, given by the
        framework (the classic `update_tool_args`); they win over the bindings.

        Raises:
            RolloutStopped: the tool raised one of its toolset's `stop_errors`.
        """
        content = await self._call(name, arguments, injected)
        return content if self.max_output is None else truncate_tool_output(content, self.max_output)

    async def _call(self, name: str, arguments: str | Mapping[str, Any], injected: Mapping[str, Any] | None) -> ToolContent:
        tool = self.state.runtime.tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self.state.runtime.tools)) or "none"
            return f"Error: unknown tool {name!r}; available tools: {available}"
        if not isinstance(tool, BoundTool):  # a plain callable lent by a parent rollout
            return await _call_plain(name, tool, arguments)
        try:
            return await tool.run(arguments, injected)
        except tool.toolset.stop_errors as exc:
            raise RolloutStopped("has_error", f"tool {name!r} raised a stop error: {exc}") from exc

    def add_tool(self, toolset: NamedToolset | str, fn: Callable[..., Any]) -> BoundTool:
        """Add a Python tool to a rollout-scoped toolset of this rollout (visible at once)."""
        target = next((t for t in self.toolsets if t is toolset or (isinstance(toolset, str) and t.name == toolset)), None)
        if target is None:
            raise ConfigError(f"add_tool: {toolset!r} is not a toolset of this rollout")
        if target.scope != "rollout":
            raise ConfigError(f"add_tool: {target.describe()} has scope {target.scope!r}; dynamic tools need scope='rollout'")
        function = ToolFunction.from_callable(fn, target.bindings.get(getattr(fn, "__name__", ""), {}))
        name = function.tool.name
        if name in self.tools or name in self.state.runtime.tools:
            raise ConfigError(f"add_tool: this rollout already has a tool named {name!r}")
        scope = self._scope(target)
        tool = BoundTool(name, target, function, None, BindingContext(self.state.task, self.state, scope, self.tools))
        self.tools[name] = tool
        self.state.runtime.tools[name] = tool
        self.state["tool_defs"] = [*(self.state.get("tool_defs") or []), tool.definition_json()]
        return tool

    async def user_client(self, state: State, model: str) -> Any:
        """An `AsyncOpenAI` on an endpoint session of the user's own: forwarded, never recorded."""
        if self._user_lock is None:
            self._user_lock = asyncio.Lock()
        async with self._user_lock:
            if self._user_state is None:
                shadow = State()
                handles, shadow_handles = upstream(state), upstream(shadow)
                shadow_handles.client = handles.client
                shadow_handles.sampling_args = dict(handles.sampling_args)
                shadow.runtime.model = model
                endpoint = await get_endpoint()
                endpoint.open(shadow).end_program_phase()
                self._user_state = shadow
        return self._user_state.get_client()

    async def aclose(self, include_group: bool | None = None) -> list[BaseException]:
        """Close the rollout's scopes (and the group's, for a group of one); returns what failed to close."""
        errors: list[BaseException] = []
        if self._user_state is not None:
            (await get_endpoint()).close_session(self._user_state)
            self._user_state = None
        close_group = self.owns_group if include_group is None else include_group
        for owner, key in self._owners:
            if key.startswith("rollout:") or (close_group and key.startswith("group:")):
                errors += await owner.close_scope(key)
        # Each tool's context holds this mapping of the tools: emptied, the rollout's tools and scopes are
        # freed by reference counting when the state goes, not left as a cycle for the collector.
        self.tools.clear()
        return errors


__all__ = ["RolloutToolbox"]
