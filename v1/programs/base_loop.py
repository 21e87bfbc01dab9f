"""The default program: a tool loop that talks to the model through the endpoint.

Each turn: check stop conditions, call the model (through the endpoint, like
every other program), run the tool calls concurrently and append their results
in call order; with a user simulator, its reply follows each answer without tool
calls. It ends on `no_tools_called` (when tools exist), `final_response` (no
tools), `user_done` (the user had nothing to say), the user's `state.stop(...)`,
`max_turns_reached`, an error, or a user `@stop`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from v1.clients.openai_chat_completions import post_options, sdk_posts
from v1.types import TimeSpan

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from v1.harness import RolloutContext
    from v1.state import State
    from v1.task import Task


async def _run_tool_calls(context: RolloutContext, state: State, tool_calls: list[Any]) -> list[dict[str, Any]]:
    start = time.time()
    results = await asyncio.gather(*(context.call_tool(call.function.name, call.function.arguments) for call in tool_calls))
    state.runtime.timing.env.spans.append(TimeSpan(start=start, end=time.time()))
    return [{"role": "tool", "tool_call_id": call.id, "content": result} for call, result in zip(tool_calls, results)]


def _tool_param(state: State) -> list[dict[str, Any]] | None:
    tool_defs = state.get("tool_defs") or None
    return [{"type": "function", "function": tool} for tool in tool_defs] if tool_defs else None


async def _create(client: Any, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> ChatCompletion:
    """`client.chat.completions.create(model=..., messages=..., tools=...)`, minus the SDK's parameter transform.

    The messages are plain JSON already, so the SDK's own `post` sends the same request, and the
    answer is parsed, and failures raised, exactly as `create()` does it.
    """
    from openai.types.chat import ChatCompletion

    request: dict[str, Any] = {"model": model, "messages": messages}
    if tools is not None:
        request["tools"] = tools
    if not sdk_posts(client):
        return await client.chat.completions.create(**request)  # type: ignore[no-any-return]
    body, options = post_options(request)
    return await client.post("/chat/completions", body=body, options=options, cast_to=ChatCompletion)  # type: ignore[no-any-return]


async def base_loop(task: Task, state: State, context: RolloutContext) -> None:
    """Run the tool loop until a stop condition fires; leaves `state["completion"]` set.

    When the model answers without tool calls and there is a user simulator, the
    user's reply is appended and the loop goes on (the user stops it with `state.stop`).
    """
    from openai import APIStatusError

    client = state.get_client()
    messages: list[dict[str, Any]] = [dict(m) for m in state["prompt"]]
    initial = len(messages)
    max_turns = state.get_max_turns(context.default_max_turns)
    try:
        while not state["is_completed"]:
            if await context.check_stops(state):
                break
            if len(state["trajectory"]) >= max_turns:
                state.stop("max_turns_reached")
                break
            tools = _tool_param(state)
            try:
                completion = await _create(client, state.get_model(), messages, tools)
            except APIStatusError:
                if state["is_completed"]:  # the endpoint stopped the rollout and said why
                    break
                raise
            message = completion.choices[0].message
            messages.append(
                message.model_dump(exclude_none=True, exclude_unset=True) | {"role": "assistant", "content": message.content}
            )
            if message.tool_calls:
                messages.extend(await _run_tool_calls(context, state, message.tool_calls))
                continue
            if context.user is None:
                state.stop("no_tools_called" if tools is not None else "final_response")
                break
            try:
                reply = await context.user_response(messages)
            except Exception as exc:
                state.record_error(exc, "user")
                break
            if state["is_completed"]:
                break
            if not reply:
                state.stop("user_done")
                break
            messages.extend(reply)
    finally:
        state["completion"] = messages[initial:]


__all__ = ["base_loop"]
