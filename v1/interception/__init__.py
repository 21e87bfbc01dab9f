"""The interception endpoint: every model call of every program goes through it.

What other packages use: the endpoint (`EndpointServer`, `get_endpoint`), a rollout's session on it
(`RolloutSession`), the call to the upstream model (`upstream`, `stop_at_timeout`, for the run engine only:
programs cannot reach it), and a wire format's parts (`Dialect`, `BadRequest`, `sse`, `openai_error_body`)
for servers that speak the same formats.
"""

from v1.interception._dialect import BadRequest, Dialect, openai_error_body, sse
from v1.interception._server import EndpointServer, get_endpoint
from v1.interception._session import RolloutSession, merge_sampling_args
from v1.interception._upstream import stop_at_timeout, upstream

__all__ = [
    "BadRequest",
    "Dialect",
    "EndpointServer",
    "RolloutSession",
    "get_endpoint",
    "merge_sampling_args",
    "openai_error_body",
    "sse",
    "stop_at_timeout",
    "upstream",
]
