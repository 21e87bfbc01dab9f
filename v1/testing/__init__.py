"""Testing seams for v1 users: a scriptable mock model server over real HTTP, and ready-made responders."""

from v1.testing._mock_server import Fault, MockModelServer, MockRequest, Reply, Responder, echo, mock_token_ids
from v1.testing._responders import failing, imperfect_reverser, requiring_key, reverser, serving_only, tool_caller

__all__ = [
    "Fault",
    "MockModelServer",
    "MockRequest",
    "Reply",
    "Responder",
    "echo",
    "failing",
    "imperfect_reverser",
    "mock_token_ids",
    "requiring_key",
    "reverser",
    "serving_only",
    "tool_caller",
]
