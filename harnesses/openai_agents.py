"""An `openai-agents` SDK agent as a harness's program, run in this process against the rollout's endpoint.

`agent` is an `agents.Agent`, a callable returning one (called with the task when it
takes an argument), or a `"module:object"` reference to either. Each rollout runs it
with `agents.Runner` (streamed with `stream = true`): every agent of the run, handoffs
included, calls the rollout's model through the endpoint (`OpenAIResponsesModel` by
default, `OpenAIChatCompletionsModel` with `api = "chat_completions"`), tracing is off
(nothing leaves the machine), and the turn limit is the rollout's. When the rollout has
visible tools, the agent also gets them as an MCP server (`MCPServerStreamableHttp` on
the rollout's MCP route, the rollout's key as bearer token) next to its own tools. The
rollout's prompt, system messages included, is the run's input. `state["final_output"]`
holds the run's final output (a pydantic output as its JSON form). Needs `pip install
openai-agents`.

    [env.harness]
    loader = "harnesses.openai_agents:OpenAIAgentsHarness"
    agent = "my_package.agents:build_agent"
"""

from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import v1 as vf
from v1.config import HarnessConfig, import_ref

if TYPE_CHECKING:
    from v1.rollout import RolloutContext

MCP_TIMEOUT_S = 60.0


class OpenAIAgentsConfig(HarnessConfig):
    """`HarnessConfig` for an openai-agents SDK agent; see the module docs."""

    agent: object = None
    """An `agents.Agent`, a callable returning one, or a `"module:object"` reference to either."""
    api: Literal["responses", "chat_completions"] = "responses"
    """The API the agent's model speaks to the endpoint."""
    stream: bool = False
    """Run with `Runner.run_streamed` (every model call streamed) instead of `Runner.run`."""


def _sdk() -> Any:
    try:
        import agents
    except ImportError:
        raise vf.ConfigError("harnesses.openai_agents needs the openai-agents SDK: pip install openai-agents") from None
    return agents


def resolve_agent(value: object) -> Any:
    """The agent (or agent factory) `value` names.

    Raises:
        ConfigError: when it is missing, does not resolve, or is neither an `agents.Agent` nor callable.
    """
    agents = _sdk()
    if value is None:
        raise vf.ConfigError("field 'agent': required (an agents.Agent, a callable returning one, or a 'module:object' ref)")
    target = import_ref(value, "agent") if isinstance(value, str) else value
    if not isinstance(target, agents.Agent) and not callable(target):
        raise vf.ConfigError(f"field 'agent': expected an agents.Agent or a callable returning one, got {type(target).__name__}")
    return target


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part)
    return str(content or "")


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


class OpenAIAgentsProgram:
    """Runs the agent once per rollout; see the module docs."""

    def __init__(self, source: Any, api: str, stream: bool) -> None:
        self.source = source
        self.api = api
        self.stream = stream

    async def __call__(self, task: vf.Task, state: vf.State, context: RolloutContext) -> None:
        agents = _sdk()
        agent = self.source if isinstance(self.source, agents.Agent) else self.source(*self._task_argument(task))
        if inspect.isawaitable(agent):
            agent = await agent
        if not isinstance(agent, agents.Agent):
            raise vf.ProgramError(f"the agent factory returned {type(agent).__name__}, not an agents.Agent")
        client = state.get_client(self.api)
        model_class = agents.OpenAIResponsesModel if self.api == "responses" else agents.OpenAIChatCompletionsModel
        run_config = agents.RunConfig(model=model_class(model=state.get_model(), openai_client=client), tracing_disabled=True)
        max_turns = state.get_max_turns(context.default_max_turns)
        async with contextlib.AsyncExitStack() as stack:
            if state.get("tool_defs"):
                endpoint = state.get_endpoint_config()
                server = agents.mcp.MCPServerStreamableHttp(
                    {
                        "url": endpoint["base_url"].removesuffix("/v1") + "/mcp",
                        "headers": {"Authorization": f"Bearer {endpoint['api_key']}"},
                        "timeout": MCP_TIMEOUT_S,
                    },
                    cache_tools_list=True,
                    name="v1",
                    client_session_timeout_seconds=MCP_TIMEOUT_S,
                )
                await stack.enter_async_context(server)
                agent = agent.clone(mcp_servers=[*agent.mcp_servers, server])
            run_input = [{"role": message["role"], "content": _text(message.get("content"))} for message in state["prompt"]]
            if self.stream:
                result = agents.Runner.run_streamed(agent, run_input, max_turns=max_turns, run_config=run_config)
                async for _ in result.stream_events():
                    pass
            else:
                result = await agents.Runner.run(agent, run_input, max_turns=max_turns, run_config=run_config)
        state["final_output"] = _jsonable(result.final_output)

    def _task_argument(self, task: vf.Task) -> tuple[Any, ...]:
        return (task,) if inspect.signature(self.source).parameters else ()


class OpenAIAgentsHarness(vf.Harness):
    """An openai-agents SDK agent as a harness; see the module docs.

    Args:
        agent: the agent (overrides the config's `agent`); the other arguments are `vf.Harness`'s.
    """

    config_type: ClassVar[type[HarnessConfig]] = OpenAIAgentsConfig

    def __init__(self, config: OpenAIAgentsConfig | dict[str, Any] | None = None, *, agent: object = None, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        config_ = self.config
        assert isinstance(config_, OpenAIAgentsConfig)
        if config_.program is not None:
            raise vf.ConfigError("OpenAIAgentsHarness builds its own program; leave 'program' unset")
        if config_.sandbox is not None:
            raise vf.ConfigError("OpenAIAgentsHarness runs the agent in this process; leave 'sandbox' unset")
        if agent is not None:
            self.config = config_ = config_.model_copy(update={"agent": agent})
        self.program = OpenAIAgentsProgram(resolve_agent(config_.agent), config_.api, config_.stream)


__all__ = ["OpenAIAgentsConfig", "OpenAIAgentsHarness", "OpenAIAgentsProgram", "resolve_agent"]
