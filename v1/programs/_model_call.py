"""One model call of a running rollout through its endpoint: the base loop's and `Env.get_model_response`'s.

What `client.chat.completions.create(**request)` (or `client.completions.create`) sends, the endpoint
gets, and it records the exchange as a trajectory step. The request is JSON bytes, as a program's: on
the loop the endpoint serves they are handed to it with the rollout's key (`EndpointAccess.own_call`,
`EndpointServer.answer_own_call`: the checks of a request, no URL, headers or carrier) and the answer
comes back as a JSON value, not text to be read again; on another loop they are posted through the
rollout's endpoint transport, the carrier the SDK clients of `state.get_client()` use, over HTTP. Handed
over, the bytes come with the value they read as (written and read back to check them, a value of their
own), so the endpoint does not read them again. A
refusal raises the SDK's own `APIStatusError` for it, a failure on the way its `APIConnectionError` /
`APITimeoutError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from v1._util.bounded_json import loads
from v1._util.json_check import compact_json_read
from v1.clients import http_library, status_error, transport_error
from v1.errors import EndpointError

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
    access = state.runtime.endpoint
    if access is None or not access.open:
        raise EndpointError("this rollout has no open endpoint")
    url = access.base_url + route
    body, read = compact_json_read({**request, "model": state.get_model()}, allow_nan=False)  # as `encode_json` writes it
    own_call = access.own_call
    answer = await own_call(route, access.api_key, body, read) if own_call is not None else None
    if answer is None:  # not on the endpoint's loop: through the carrier, as any request
        headers = {
            "authorization": "Bearer " + access.api_key,
            "content-type": "application/json",
            "content-length": str(len(body)),
        }
        try:
            answer = await access.pools.transport.post(url, headers, body)
        except http_library().TransportError as exc:
            raise transport_error(exc, url) from exc
    if answer.status >= 400:
        raise status_error(answer.status, answer.headers, answer.body, url)
    if answer.value is not None:  # the endpoint of this loop answered with the value itself
        return answer.value  # type: ignore[no-any-return]
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        raise ValueError("call_model is for answers that do not stream")
    return loads(answer.body, "the endpoint's answer", finite=False)  # type: ignore[no-any-return]


__all__ = ["CHAT_ROUTE", "COMPLETIONS_ROUTE", "call_model"]
