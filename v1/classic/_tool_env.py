"""`ToolEnv` and `StatefulToolEnv`: Python functions as the model's tools, in the classic loop.

Tool schemas come from signatures and docstrings (as for a v1 `Toolset`); each turn offers them
to the model through the endpoint, and `env_response` runs the last answer's tool calls with
`call_tool`, in call order. A tool that raises becomes a tool message (`error_formatter`), unless
it raised one of `stop_errors`, which ends the rollout with the error recorded (`where: "tool"`).
`StatefulToolEnv` hides some arguments from the schema and fills them from the state
(`update_tool_args`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from v1.classic._multiturn_env import MultiTurnEnv
from v1.errors import ConfigError
from v1.rollout import State, stop
from v1.tools import ToolFunction, Toolset, parse_tool_arguments
from v1.types import Messages

TOOLSET_NAME = "tool_env"
"""The name of a `ToolEnv`'s toolset in its harness."""


def _default_error_formatter(error: Exception) -> str:
    return f"{error}"


def _skipped_default(tool: Callable[..., Any], argument: str) -> Callable[[], Any]:
    """The binding of a skipped argument when `update_tool_args` gives none: its default, else None."""
    default = inspect.signature(tool).parameters[argument].default
    value = None if default is inspect.Parameter.empty else default
    return lambda: value


class ToolEnv(MultiTurnEnv):
    """Tool calling with Python functions; ends when the model answers without a tool call.

    The tools are a rollout `Toolset` of the environment's harness (`env.toolset`), so the core's
    dispatcher runs every call: argument parsing and validation, `error_formatter`, `stop_errors`.

    Args:
        tools: named functions (sync or async); their signatures and docstrings are the schemas.
        max_turns: the most model calls per rollout.
        error_formatter: a tool's exception as the tool message's text.
        stop_errors: exception types that end the rollout instead (recorded as its error).
        **kwargs: the `Environment` arguments.
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        error_formatter: Callable[[Exception], str] = _default_error_formatter,
        stop_errors: Sequence[type[Exception]] | None = None,
        **kwargs: Any,
    ) -> None:
        if "max_steps" in kwargs:  # seed 004's name for max_turns
            max_turns = kwargs.pop("max_steps")
        # the seed names the tool list `tools`; it shadows `Environment.tools()` on a ToolEnv
        self.tools: list[Callable[..., Any]] = []  # type: ignore[assignment]
        self.skipped_args: dict[str, list[str]] = {}
        self.error_formatter = error_formatter
        self.stop_errors = tuple(stop_errors or ())
        for error_type in self.stop_errors:
            if not (isinstance(error_type, type) and issubclass(error_type, BaseException)):
                raise ConfigError(f"{type(self).__name__}: stop_errors must be exception classes, got {error_type!r}")
        self.toolset = self._build_toolset()
        for tool in tools or []:
            self.add_tool(tool)
        super().__init__(max_turns=max_turns, **kwargs)

    def harness_options(self) -> dict[str, Any]:
        return {**super().harness_options(), "toolsets": [self.toolset]}

    def _build_toolset(self) -> Toolset:
        """The tools as one rollout toolset; each skipped argument a binding that `update_tool_args` fills per call."""
        bindings = {
            f"{getattr(tool, '__name__', '')}.{argument}": _skipped_default(tool, argument)
            for tool in self.tools
            for argument in self.skipped_args.get(getattr(tool, "__name__", ""), [])
        }
        return Toolset(
            self.tools,
            bindings=bindings,
            name=TOOLSET_NAME,
            error_formatter=lambda error: self.error_formatter(error),  # type: ignore[arg-type]
            stop_errors=self.stop_errors,
        )

    def _replace_toolset(self) -> None:
        old, self.toolset = self.toolset, self._build_toolset()
        harness = getattr(self, "harness", None)
        if harness is not None:
            harness.toolsets = [self.toolset if toolset is old else toolset for toolset in harness.toolsets]

    @property
    def tool_map(self) -> dict[str, ToolFunction]:
        """The tools by name, as the toolset describes them."""
        return self.toolset.functions

    def add_tool(self, tool: Callable[..., Any], args_to_skip: Iterable[str] = ()) -> None:
        """Offer `tool` to the model from the next rollout on (`args_to_skip`: arguments kept out of its schema).

        Raises:
            ConfigError: an unnamed function, *args/**kwargs, or a name already taken.
        """
        name = ToolFunction.from_callable(tool, hidden=list(args_to_skip)).tool.name
        if name in self.tool_map:
            raise ConfigError(f"{type(self).__name__}: a tool named {name!r} already exists")
        self.tools.append(tool)
        self.skipped_args[name] = list(args_to_skip)
        self._replace_toolset()

    def remove_tool(self, tool: Callable[..., Any] | str) -> None:
        """Stop offering a tool (by function or name).

        Raises:
            ConfigError: an unknown tool.
        """
        name = tool if isinstance(tool, str) else getattr(tool, "__name__", "")
        if name not in self.tool_map:
            raise ConfigError(f"{type(self).__name__}.remove_tool: no tool named {name!r}; tools: {sorted(self.tool_map)}")
        function = self.tool_map[name]
        self.skipped_args.pop(name, None)
        self.tools = [t for t in self.tools if t is not function.fn]
        self._replace_toolset()

    @property
    def oai_tools(self) -> list[dict[str, Any]]:
        """The tools in OpenAI's format."""
        return [{"type": "function", "function": f.tool.model_dump(exclude_none=True)} for f in self.tool_map.values()]

    def tool_definitions(self, state: State) -> list[dict[str, Any]] | None:
        return self.oai_tools or None

    def tool_descriptions(self) -> list[dict[str, Any]] | None:
        return [f.tool.model_dump(exclude_none=True) for f in self.tool_map.values()] or None

    async def setup_state(self, state: State) -> State:
        state["tool_defs"] = self.tool_descriptions() or []
        return state

    @stop(priority=40)
    async def no_tools_called(self, state: State) -> bool:
        """The model's last answer called no tool."""
        trajectory = state["trajectory"]
        if not trajectory:
            return False
        last = trajectory[-1]["completion"]
        message = last[-1] if isinstance(last, list) and last else {}
        return not (isinstance(message, dict) and message.get("tool_calls"))

    async def call_tool(self, tool_name: str, tool_args: dict[str, Any], tool_call_id: str, **kwargs: Any) -> dict[str, Any]:
        """Run one tool call through the rollout's toolbox and return its tool message; a failure is the message's text.

        Args:
            tool_name, tool_args, tool_call_id: the call (skipped arguments in `tool_args` are injected as they are).
            **kwargs: `state`, the rollout's state.

        Raises:
            RolloutStopped: the tool raised one of `stop_errors`, which ends the rollout.
        """
        state: State = kwargs["state"]
        skipped = self.skipped_args.get(tool_name, [])
        visible = {key: value for key, value in tool_args.items() if key not in skipped}
        injected = {key: value for key, value in tool_args.items() if key in skipped}
        toolbox = state.runtime.toolbox
        if toolbox is None:
            raise ConfigError(f"{type(self).__name__}.call_tool: the rollout has no toolbox (call it inside a rollout)")
        content = await toolbox.call(tool_name, visible, injected)
        return {"role": "tool", "content": content, "tool_call_id": tool_call_id}

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        last = messages[-1] if isinstance(messages, list) and messages else {}
        replies: list[dict[str, Any]] = []
        for call in last.get("tool_calls") or []:
            name = call["function"]["name"]
            arguments = parse_tool_arguments(name, call["function"].get("arguments") or "{}")
            if isinstance(arguments, str):
                replies.append({"role": "tool", "content": arguments, "tool_call_id": call["id"]})
                continue
            hidden = self.skipped_args.get(name, [])
            visible = {key: value for key, value in arguments.items() if key not in hidden}  # never the model's to set
            arguments = self.update_tool_args(name, visible, messages, state, **kwargs)
            replies.append(await self.call_tool(name, arguments, call["id"], state=state))
        return replies

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        """The arguments a tool is called with (as the model sent them here; `StatefulToolEnv` adds some)."""
        return tool_args


class StatefulToolEnv(ToolEnv):
    """Tools that need per-rollout state: arguments hidden from the model, filled by `update_tool_args`.

    Override `setup_state` to create the per-rollout values and `update_tool_args` to inject them;
    register such tools with `add_tool(tool, args_to_skip=[...])`.
    """

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Messages, state: State, **kwargs: Any
    ) -> dict[str, Any]:
        """Add the skipped arguments of `tool_name` from `state` (a state field of the same name, by default)."""
        hidden = self.skipped_args.get(tool_name, [])
        return {**tool_args, **{name: state[name] for name in hidden if name in state}}


__all__ = ["StatefulToolEnv", "ToolEnv"]
