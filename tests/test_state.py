"""`v1.State`: guarded managed fields, stop, finalize, borrowing and runtime accessors."""

from __future__ import annotations

import copy
import decimal
import inspect
import json
import pickle
import random
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest

import v1
from v1.interception import upstream
from v1.rollout._state import (
    MANAGED_FIELDS,
    EndpointAccess,
    NamedToolset,
    RolloutRuntime,
    RolloutSandboxHandles,
    RolloutTools,
    SDKClientFactory,
)
from v1.rollout._timing import TimingRecord


def make_state(**task_fields) -> v1.State:
    return v1.State.for_task({"prompt": "hi", "answer": "4", **task_fields})


# -- construction ------------------------------------------------------------------------


def test_for_task_builds_a_fresh_state_with_a_frozen_task():
    state = v1.State.for_task({"prompt": "hi", "answer": "4", "example_id": 7})
    assert isinstance(state.task, v1.Task)
    assert state.task.frozen
    assert state.task["prompt"] == [{"role": "user", "content": "hi"}]
    assert state["example_id"] == 7
    assert state["trajectory"] == []
    assert state["is_completed"] is False
    assert state["is_truncated"] is False
    assert state["stop_condition"] is None
    assert state["error"] is None
    assert isinstance(state["trajectory_id"], str) and state["trajectory_id"]
    assert "answer" not in state


def test_for_task_reuses_a_frozen_task_and_freezes_an_unfrozen_one():
    frozen = v1.Task(prompt="hi").freeze()
    assert v1.State.for_task(frozen).task is frozen
    unfrozen = v1.Task(prompt="hi")
    state = v1.State.for_task(unfrozen)
    assert state.task.frozen
    assert state.task == unfrozen


def test_for_task_validates_the_task():
    with pytest.raises(v1.TaskError, match="system messages are not allowed"):
        v1.State.for_task({"prompt": [{"role": "system", "content": "x"}]})


def test_each_state_gets_its_own_trajectory_id_and_list():
    first, second = make_state(), make_state()
    assert first["trajectory_id"] != second["trajectory_id"]
    assert first["trajectory"] is not second["trajectory"]


def test_constructor_refuses_managed_fields():
    with pytest.raises(v1.StateFieldError, match="managed by the framework"):
        v1.State(error={"type": "X"})
    assert v1.State(custom=1)["custom"] == 1


# -- managed fields ----------------------------------------------------------------------

MUTATIONS = {
    "setitem": lambda state, key: state.__setitem__(key, "x"),
    "update": lambda state, key: state.update({key: "x"}),
    "update-kwargs": lambda state, key: state.update(**{key: "x"}),
    "setdefault": lambda state, key: state.setdefault(key, "x"),
    "pop": lambda state, key: state.pop(key),
    "pop-default": lambda state, key: state.pop(key, None),
    "del": lambda state, key: state.__delitem__(key),
    "ior": lambda state, key: state.__ior__({key: "x"}),
}


@pytest.mark.parametrize("key", sorted(MANAGED_FIELDS))
@pytest.mark.parametrize("how", sorted(MUTATIONS))
def test_managed_fields_are_refused(key, how):
    state = make_state()
    before = dict(state)
    with pytest.raises(v1.StateFieldError, match=rf"state\['{key}'\] is managed by the framework"):
        MUTATIONS[how](state, key)
    assert dict(state) == before


def test_managed_fields_include_the_documented_ones():
    assert {"is_completed", "stop_condition", "is_truncated", "error", "trajectory"} <= MANAGED_FIELDS


def test_augmented_or_assignment_is_refused():
    state = make_state()
    with pytest.raises(v1.StateFieldError, match="managed by the framework"):
        state |= {"is_completed": True}
    assert state["is_completed"] is False


def test_update_is_all_or_nothing():
    state = make_state()
    with pytest.raises(v1.StateFieldError):
        state.update({"user_field": 1, "error": "x"})
    assert "user_field" not in state


@pytest.mark.parametrize("method", ["clear", "popitem"])
def test_clear_and_popitem_are_refused(method):
    state = make_state()
    state["user"] = 1
    before = dict(state)
    with pytest.raises(v1.StateFieldError, match="is not allowed"):
        getattr(state, method)()
    assert dict(state) == before


def test_state_field_error_hints_at_the_way_to_do_it():
    state = make_state()
    with pytest.raises(v1.StateFieldError, match=r"use state\.stop\(condition\)"):
        state["is_completed"] = True
    with pytest.raises(v1.StateFieldError, match=r"raise a v1\.Error subclass"):
        state["error"] = "boom"
    with pytest.raises(v1.StateFieldError, match="recorded by the interception endpoint"):
        state["trajectory"] = []


def test_state_field_error_is_a_key_error_with_a_readable_message():
    state = make_state()
    with pytest.raises(KeyError) as info:
        state["error"] = "x"
    assert isinstance(info.value, v1.Error)
    assert str(info.value).startswith("state['error'] is managed")


def test_user_fields_are_allowed():
    state = make_state()
    state["answer_given"] = "4"
    state.update(score_notes=["a"], attempts=2)
    state |= {"flag": True}
    assert state.setdefault("attempts", 99) == 2
    assert state.setdefault("fresh", 1) == 1
    assert state.pop("flag") is True
    del state["fresh"]
    assert state["answer_given"] == "4"
    assert state["score_notes"] == ["a"]
    assert "flag" not in state and "fresh" not in state


# -- stop --------------------------------------------------------------------------------


def test_stop_first_condition_wins():
    state = make_state()
    state.stop("found_answer")
    state.stop("max_turns_reached")
    assert state["is_completed"] is True
    assert state["stop_condition"] == "found_answer"


def test_stop_default_condition():
    state = make_state()
    state.stop()
    assert state["stop_condition"] == "state_done"


# -- finalize ----------------------------------------------------------------------------


def test_finalize_makes_state_json_and_drops_runtime():
    state = make_state()
    state.runtime.model = "m"
    state["notes"] = {"a": [1, 2]}
    assert state.finalize() is state
    data = json.loads(json.dumps(state))
    assert data["notes"] == {"a": [1, 2]}
    assert isinstance(data["timing"], dict)
    assert state["error"] is None
    assert state.runtime.model is None
    assert state.runtime.finalized


def test_finalize_replaces_a_non_json_user_value_by_its_repr_and_records_the_error():
    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque handle>"

    state = make_state()
    state["handle"] = Opaque()
    state["fine"] = 1
    state.finalize()
    json.dumps(state)
    assert state["handle"] == "<Opaque handle>"
    assert state["fine"] == 1
    assert state["error"]["type"] == "TypeError"
    assert "state['handle'] is not JSON-serializable" in state["error"]["message"]
    assert state["error"]["where"] == "finalize"
    assert state["is_completed"] is True
    assert state["stop_condition"] == "has_error"


def test_finalize_keeps_the_first_error_and_is_idempotent():
    state = make_state()
    state["a"] = {1, 2}
    state["b"] = object()
    state.finalize()
    first_error = dict(state["error"])
    assert first_error["message"].startswith("state['a']")
    state.finalize()
    assert state["error"] == first_error
    assert state["b"].startswith("<object object")


@pytest.mark.parametrize("where", ["start_time", "setup", "model span"])
def test_finalize_checks_the_timing_a_program_set_to_what_json_does_not_take(where: str) -> None:
    """The timing record is left out of the whole-state check only while every time in it is an int or
    a float; a program holds the record, and a time it set to anything else is checked as any field."""
    state = make_state()
    timing = state.runtime.timing
    odd = decimal.Decimal(5)  # arithmetic works, so the record is built; json.dumps refuses it
    if where == "start_time":
        timing.start_time = odd
    elif where == "setup":
        timing.setup.start, timing.setup.end = odd, decimal.Decimal(7)
    else:
        timing.model.spans.append(types.SimpleNamespace(start=odd, end=decimal.Decimal(6)))
    state.finalize()
    json.dumps(state)
    assert state["error"]["where"] == "finalize"
    if where == "start_time":  # the record is written, with the Decimal in it: saved as its repr
        assert isinstance(state["timing"], str) and "Decimal" in state["timing"]
        assert "state['timing'] is not JSON-serializable" in state["error"]["message"]
    else:  # a Decimal and a float do not add up: no record at all, and why
        assert state["timing"] is None
        assert "state['timing'] could not be written" in state["error"]["message"]
        assert "Decimal" in state["error"]["message"]


def test_finalize_overrides_an_earlier_stop_condition_with_has_error():
    state = make_state()
    state.stop("done")
    state["bad"] = object()
    state.finalize()
    assert state["stop_condition"] == "has_error"


# -- timing ------------------------------------------------------------------------------


def random_timing(seed: int) -> TimingRecord:
    """A record with each stamp unset, a plausible time, or out of order (an end before its start)."""
    pick = random.Random(seed)

    def stamp() -> float:
        return pick.choice([0.0, 1.7e9 + pick.random() * 100, pick.uniform(-5.0, 5.0), 1e-300])

    timing = TimingRecord()
    timing.start_time = stamp()
    for span in (timing.setup, timing.generation, timing.scoring):
        span.start, span.end = stamp(), stamp()
    for spans in (timing.model, timing.env):
        spans.spans.extend(v1.TimeSpan(start=stamp(), end=stamp()) for _ in range(pick.randrange(4)))
    return timing


@pytest.mark.parametrize("seed", range(200))
def test_the_timing_record_saves_what_a_rollout_timing_would(seed: int) -> None:
    """The record a rollout stamps and the public `RolloutTiming` give the same JSON, to the bit (an empty
    span list's duration stays the integer 0, as `sum` gives it)."""
    timing = random_timing(seed)
    typed = timing.to_model()
    assert repr(timing.as_dict()) == repr(typed.model_dump()) == repr(typed.as_dict())
    assert (timing.total, timing.overhead) == (typed.total, typed.overhead)


def test_a_typed_timing_read_keeps_recording_the_rollout() -> None:
    """A classic reader's `state["timing"]` is a `RolloutTiming`; stamps made after it was read land in it."""
    state = make_state()
    state.runtime.timing.generation.start = 10.0
    typed = state.runtime.typed_timing()
    assert isinstance(typed, v1.RolloutTiming) and typed.generation.start == 10.0
    assert state.runtime.typed_timing() is typed
    state.runtime.timing.generation.end = 12.5
    state.runtime.timing.model.spans.append(v1.TimeSpan(start=10.5, end=11.0))
    state.finalize()
    assert typed.generation.end == 12.5 and state["timing"]["generation"]["duration"] == 2.5
    assert state["timing"] == typed.model_dump() and state.runtime.typed_timing() is typed


# -- borrowing ---------------------------------------------------------------------------


async def bash_tool(command: str) -> str:
    return command


async def python_tool(code: str) -> str:
    return code


def parent_state() -> v1.State:
    parent = make_state()
    parent.runtime.model = "parent-model"
    upstream(parent).client = "parent-client-handle"
    upstream(parent).sampling_args = {"temperature": 0.5}
    parent.runtime.tools = {"bash": bash_tool, "python": python_tool}
    return parent


def test_child_borrows_model_and_client():
    parent = parent_state()
    child = parent.for_task({"prompt": "child"}, borrow=["model"])
    assert child is not parent
    assert child.task["prompt"] == [{"role": "user", "content": "child"}]
    assert child.get_model() == "parent-model"
    assert upstream(child).client == "parent-client-handle"
    assert upstream(child).sampling_args == {"temperature": 0.5}
    upstream(child).sampling_args["temperature"] = 1.0
    assert upstream(parent).sampling_args == {"temperature": 0.5}
    assert child.get_tools() == {}


def test_borrow_client_as_a_string():
    child = parent_state().for_task({"prompt": "child"}, borrow="client")
    assert upstream(child).client == "parent-client-handle"
    assert child.runtime.model == "parent-model"


def test_borrow_tools_shares_all_of_them():
    child = parent_state().for_task({"prompt": "child"}, borrow=["tools"])
    assert child.get_tools() == {"bash": bash_tool, "python": python_tool}
    assert child.runtime.model is None


def test_tools_selects_named_parent_tools():
    child = parent_state().for_task({"prompt": "child"}, tools="bash")
    assert child.get_tools() == {"bash": bash_tool}
    child = parent_state().for_task({"prompt": "child"}, tools=["bash", "python"])
    assert set(child.get_tools()) == {"bash", "python"}


def test_get_tools_returns_a_copy():
    child = parent_state().for_task({"prompt": "child"}, tools="bash")
    child.get_tools().clear()
    assert child.get_tools() == {"bash": bash_tool}


def test_child_without_borrow_shares_nothing():
    child = parent_state().for_task({"prompt": "child"})
    assert child.runtime.model is None
    assert upstream(child).client is None
    assert child.get_tools() == {}


def test_unknown_borrow_name_is_a_config_error():
    with pytest.raises(v1.ConfigError, match=r"borrow: unknown handle\(s\) \['gpu'\]"):
        parent_state().for_task({"prompt": "child"}, borrow=["model", "gpu"])


def test_borrow_without_a_parent_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="need a parent"):
        v1.State.for_task({"prompt": "child"}, borrow=["model"])
    with pytest.raises(v1.ConfigError, match="need a parent"):
        v1.State.for_task({"prompt": "child"}, tools="bash")


def test_missing_parent_tool_is_a_config_error():
    with pytest.raises(v1.ConfigError, match=r"tools: the parent rollout has no tool\(s\) \['missing'\]"):
        parent_state().for_task({"prompt": "child"}, tools=["bash", "missing"])


def test_borrowing_a_sandbox_the_parent_lacks_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="the parent rollout has no sandbox"):
        parent_state().for_task({"prompt": "child"}, borrow=["sandbox"])


# -- runtime accessors -------------------------------------------------------------------


def test_get_max_turns_precedence():
    state = make_state(max_turns=3)
    state.runtime.max_turns = 5
    assert state.get_max_turns(7) == 3
    state = make_state()
    state.runtime.max_turns = 5
    assert state.get_max_turns(7) == 5
    assert make_state().get_max_turns(7) == 7
    assert make_state(max_turns=30).get_max_turns(7) == 7  # a task lowers the limit, never raises it


def test_get_model_without_a_model_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="no model for this rollout"):
        make_state().get_model()


def test_get_client_without_an_open_endpoint_is_an_endpoint_error():
    state = make_state()
    state.runtime.model = "m"
    with pytest.raises(v1.EndpointError, match="this rollout has no open endpoint"):
        state.get_client()
    with pytest.raises(v1.EndpointError, match="this rollout has no open endpoint"):
        state.get_client(sync=True)


def test_get_endpoint_config_without_an_open_endpoint_is_an_endpoint_error():
    state = make_state()
    state.runtime.model = "m"
    with pytest.raises(v1.EndpointError, match="no open endpoint"):
        state.get_endpoint_config()


@pytest.mark.parametrize("api", ["renderer", "embeddings"])
def test_unsupported_api_is_not_supported(api):
    state = make_state()
    with pytest.raises(v1.NotSupportedError, match=rf"api='{api}' is not supported yet"):
        state.get_client(api)
    with pytest.raises(v1.NotSupportedError, match=rf"api='{api}' is not supported yet"):
        state.get_endpoint_config(api)


def test_not_supported_error_is_a_config_error():
    assert issubclass(v1.NotSupportedError, v1.ConfigError)


# -- pickling ----------------------------------------------------------------------------


@pytest.mark.parametrize("roundtrip", [lambda s: pickle.loads(pickle.dumps(s)), copy.deepcopy])
def test_pickle_round_trip(roundtrip):
    state = make_state(info={"k": [1]})
    state["notes"] = ["a"]
    state.stop("done")
    state.runtime.model = "m"
    clone = roundtrip(state)
    assert type(clone) is v1.State
    assert dict(clone) == dict(state)
    assert clone.task == state.task
    assert clone.task.frozen
    assert clone.runtime.model is None
    with pytest.raises(v1.StateFieldError):
        clone["error"] = "x"
    clone["notes"].append("b")
    assert state["notes"] == ["a"]


# -- a leaf: its annotations resolve without the parts above it ----------------------------


def test_the_runtimes_annotations_resolve() -> None:
    runtime = typing.get_type_hints(RolloutRuntime)
    assert runtime["toolbox"] == RolloutTools | None
    assert runtime["sandboxes"] == RolloutSandboxHandles | None
    assert runtime["upstream_from"] == RolloutRuntime | None
    assert typing.get_type_hints(EndpointAccess)["pools"] is SDKClientFactory


def test_add_tools_annotations_resolve() -> None:
    assert typing.get_type_hints(v1.State.add_tool) == {
        "toolset": NamedToolset | str,
        "tool": Callable[..., Any],
        "return": type(None),
    }


def test_every_annotation_of_the_state_and_its_protocols_resolves() -> None:
    owners = [v1.State, NamedToolset, SDKClientFactory, RolloutTools, RolloutSandboxHandles]
    methods = [
        member
        for owner in owners
        for member in vars(owner).values()
        if inspect.isfunction(member) and member.__qualname__.startswith(f"{owner.__name__}.")
    ]
    methods.append(vars(v1.State)["for_task"].fn)
    for method in methods:
        hints = typing.get_type_hints(method)
        assert "return" in hints or method.__name__ == "__init__", method.__qualname__
    assert typing.get_type_hints(v1.State.get_sandbox)["return"].__name__ == "Sandbox"
