"""The framework's way from a rollout's `State` to its upstream: the client, the harness's sampling args, the session.

`upstream(state)` is the only path to a rollout's `UpstreamHandles`: they are keyed weakly by the
state's runtime, never stored on it, so nothing a program holds (the state, its runtime, the SDK
clients and tools it hands out) leads to them. The endpoint, the harness, the env and the toolbox
import this module; programs (`v1/programs/`) and the state never do, which
`tests/test_import_structure.py` checks.
"""

from __future__ import annotations

from v1._util.weak_identity import WeakIdentityMap
from v1.errors import ModelError
from v1.interception._session import UpstreamHandles
from v1.rollout import RolloutRuntime, State

_handles: WeakIdentityMap[RolloutRuntime, UpstreamHandles] = WeakIdentityMap()


def upstream(state: State) -> UpstreamHandles:
    """The framework-only handles of `state`'s rollout (created on first use).

    A rollout that borrowed its parent's model or client (`state.for_task(..., borrow=["client"])`)
    starts with a copy of the parent's client and sampling args.
    """
    runtime = state.runtime
    handles = _handles.get(runtime)
    if handles is None:
        parent = _handles.get(runtime.upstream_from) if runtime.upstream_from is not None else None
        handles = _handles[runtime] = UpstreamHandles()
        if parent is not None:
            handles.client = parent.client
            handles.sampling_args = dict(parent.sampling_args)
        runtime.upstream_from = None
    return handles


def stop_at_timeout(state: State) -> None:
    """A program ran out of time: `timeout_reached`, unless the upstream was failing all along.

    A call still retrying an upstream failure (a 503 outage that outlasts `timeout_seconds`)
    makes the rollout's error a `ModelError`, which `Env`'s retry policy retries, not a scored timeout.
    """
    session = upstream(state).session
    error = session.failing if session is not None else None
    if error is not None:
        message = f"the upstream was still failing when the rollout timed out: {type(error).__name__}: {error}"
        state.record_error(ModelError(message), "model")
    state.stop("timeout_reached")


__all__ = ["stop_at_timeout", "upstream"]
