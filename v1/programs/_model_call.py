"""One model call of a running rollout through its endpoint: the base loop's and `Env.get_model_response`'s.

What `client.chat.completions.create(**request)` (or `client.completions.create`) sends, the endpoint
gets, and it records the exchange as a trajectory step. The request goes straight into the endpoint's
handler when it runs in this process (no SDK request building, no HTTP, no SDK client built), else
through the rollout's SDK client; a failure raises the SDK's own `APIStatusError` for it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from v1.clients.openai_chat_completions import post_options, sdk_posts
from v1.clients.openai_wire import encode_json, status_error
from v1.interception.in_process import post_json

if TYPE_CHECKING:
    from v1.rollout import State

CHAT_ROUTE = "/chat/completions"
COMPLETIONS_ROUTE = "/completions"


async def call_model(state: State, request: dict[str, Any], route: str = CHAT_ROUTE) -> dict[str, Any]:
    """Send `request` (the rollout's model set on it) to the rollout's endpoint; the answer's JSON body.

    Args:
        state: the rollout's state (inside its program).
        request: a `create()` request without `model` (`messages` or `prompt`, `tools`, sampling args).
        route: `CHAT_ROUTE` or `COMPLETIONS_ROUTE`.

    Raises:
        openai.APIStatusError: the endpoint refused the call (a stopped rollout) or the upstream failed.
    """
    config = state.get_endpoint_config()
    request = {**request, "model": config["model"]}
    answered = await post_json(config["base_url"], config["api_key"], route, encode_json(request))
    if answered is not None:
        status, headers, content = answered
        if status >= 400:
            raise status_error(status, headers, content, config["base_url"] + route)
        return json.loads(content)  # type: ignore[no-any-return]
    client = state.get_client()
    if sdk_posts(client):
        from openai.types import Completion
        from openai.types.chat import ChatCompletion

        body_json, options = post_options(request)
        cast_to = Completion if route == COMPLETIONS_ROUTE else ChatCompletion
        answer = await client.post(route, body=body_json, options=options, cast_to=cast_to)
    else:
        create = client.completions.create if route == COMPLETIONS_ROUTE else client.chat.completions.create
        answer = await create(**request)
    return answer.model_dump(exclude_none=True, exclude_unset=True)  # type: ignore[no-any-return]


__all__ = ["CHAT_ROUTE", "COMPLETIONS_ROUTE", "call_model"]
