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

from v1.programs._model_call import call_model
from v1.types import TimeSpan

if TYPE_CHECKING:
    from v1.rollout import RolloutContext, State, Task


async def _run_tool_calls(context: RolloutContext, state: State, tool_calls: list[Any]) -> list[dict[str, Any]]:
    start = time.time()
    calls = [context.call_tool(call["function"]["name"], call["function"]["arguments"]) for call in tool_calls]
    # one call is awaited in this task: gathering it would wrap it in a task of its own for nothing
    results = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
    state.runtime.timing.env.spans.append(TimeSpan(start=start, end=time.time()))
    return [{"role": "tool", "tool_call_id": call["id"], "content": result} for call, result in zip(tool_calls, results)]


def _tool_param(state: State) -> list[dict[str, Any]] | None:
    tool_defs = state.get("tool_defs") or None
    return [{"type": "function", "function": tool} for tool in tool_defs] if tool_defs else None


async def _call_model(state: State, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One Chat Completions call through the rollout's endpoint; the answer's assistant message as JSON.

    The message is what the SDK's `message.model_dump(exclude_none=True, exclude_unset=True)` gives,
    with `content` always present: the endpoint's chat render writes no other null member
    (`test_dialects.py` holds it to that), and its answer is a value of this call's own.
    """
    request: dict[str, Any] = {"messages": messages}
    if tools is not None:
        request["tools"] = tools
    return (await call_model(state, request))["choices"][0]["message"]  # type: ignore[no-any-return]


async def base_loop(task: Task, state: State, context: RolloutContext) -> None:
    """Run the tool loop until a stop condition fires; leaves `state["completion"]` set.

    When the model answers without tool calls and there is a user simulator, the
    user's reply is appended and the loop goes on (the user stops it with `state.stop`).
    """
    from openai import APIStatusError

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
                message = await _call_model(state, messages, tools)
            except APIStatusError:
                if state["is_completed"]:  # the endpoint stopped the rollout and said why
                    break
                raise
            messages.append(message)
            if message.get("tool_calls"):
                messages.extend(await _run_tool_calls(context, state, message["tool_calls"]))
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
