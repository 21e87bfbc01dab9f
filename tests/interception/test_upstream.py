"""`v1.interception.upstream`: the framework's only way from a state to its upstream handles."""

from __future__ import annotations

import importlib
import typing

import pytest

import v1
from v1.clients import Client
from v1.interception import RolloutSession
from v1.interception import _session as session_module
from v1.interception import _upstream as upstream_module
from v1.interception._upstream import UpstreamHandles, upstream


def test_upstream_handles_annotations_resolve() -> None:
    hints = typing.get_type_hints(UpstreamHandles)
    assert hints["client"] == Client | None
    assert hints["session"] == RolloutSession | None


def test_handles_live_beside_the_state_not_on_it() -> None:
    state = v1.State.for_task({"prompt": "x"})
    handles = upstream(state)
    assert upstream(state) is handles
    assert handles not in vars(state.runtime).values() and handles not in vars(state).values()
    state.finalize()
    assert upstream(state) is not handles, "a finalized state starts over with empty handles"


def test_a_borrowed_client_is_copied_once_and_the_link_dropped() -> None:
    parent = v1.State.for_task({"prompt": "x"})
    upstream(parent).sampling_args = {"temperature": 0.5}
    child = parent.for_task({"prompt": "y"}, borrow="client")
    assert child.runtime.upstream_from is parent.runtime
    assert upstream(child).sampling_args == {"temperature": 0.5}
    assert child.runtime.upstream_from is None
    upstream(parent).sampling_args["temperature"] = 1.0
    assert upstream(child).sampling_args == {"temperature": 0.5}


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("v1.rollout._state", "upstream"),
        ("v1.rollout._state", "UpstreamHandles"),
        ("v1.interception._session", "stop_at_timeout"),
    ],
)
def test_moved_names_live_only_in_the_upstream_module(module: str, name: str) -> None:
    """The deprecation aliases are gone (issue 37): the state never leads to the upstream, not even lazily."""
    with pytest.raises(ImportError):
        exec(f"from {module} import {name}", {})


@pytest.mark.parametrize("module", ["v1.rollout._state", "v1.interception._session"])
def test_other_missing_names_are_still_attribute_errors(module: str) -> None:
    assert not hasattr(importlib.import_module(module), "nope")
    with pytest.raises(ImportError):
        exec(f"from {module} import nope", {})


def test_the_module_names_its_public_surface() -> None:
    # `UpstreamHandles` is importable here too, but its one public home is `v1.interception`.
    assert sorted(upstream_module.__all__) == ["stop_at_timeout", "upstream"]
    assert upstream_module.UpstreamHandles is session_module.UpstreamHandles


@pytest.mark.parametrize(
    ("requested", "harness", "merged"),
    [
        ({"temperature": 0.2, "seed": 1}, {}, {"temperature": 0.2, "seed": 1}),
        (
            {"max_completion_tokens": 9, "top_p": 0.5, "temperature": 0.9},
            {"extra_body": {"temperature": 0.1, "top_k": 5}, "max_tokens": 4, "top_k": None},
            {"top_p": 0.5, "temperature": 0.1, "max_tokens": 4},
        ),
        ({"extra_body": {"x": 1}, "seed": 2}, {"extra_body": "not a mapping", "seed": 3}, {"extra_body": {"x": 1}, "seed": 3}),
    ],
)
def test_the_harness_wins_every_key_it_sets_in_its_order(
    requested: dict[str, object], harness: dict[str, object], merged: dict[str, object]
) -> None:
    result = session_module.merge_sampling_args(requested, harness)
    assert list(result.items()) == list(merged.items())
    assert result is not requested
