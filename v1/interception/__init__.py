"""The interception endpoint: every model call of every program goes through it."""

from v1.interception.server import EndpointServer, get_endpoint
from v1.interception.session import RolloutSession, merge_sampling_args

__all__ = ["EndpointServer", "RolloutSession", "get_endpoint", "merge_sampling_args"]
