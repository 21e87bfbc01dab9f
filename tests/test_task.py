"""`v1.Task`: deep-frozen, JSON-only task rows."""

from __future__ import annotations

import copy
import json
import pickle
import re
import types

import pytest

import v1
from v1.rollout._task import FrozenDict, FrozenList, thaw


def nested_task() -> v1.Task:
    return v1.Task(
        {
            "prompt": [{"role": "user", "content": "What is 2+2?"}],
            "answer": "4",
            "info": {"tags": ["math", {"level": 1}], "meta": {"source": "gsm"}},
        }
    )


# -- deep freeze ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate",
    [
        lambda info: info.__setitem__("new", 1),
        lambda info: info.__delitem__("meta"),
        lambda info: info.update(new=1),
        lambda info: info.setdefault("new", 1),
        lambda info: info.pop("meta"),
        lambda info: info.popitem(),
        lambda info: info.clear(),
        lambda info: info.__ior__({"new": 1}),
        lambda info: info["meta"].__setitem__("source", "other"),
        lambda info: info["tags"][1].__setitem__("level", 2),
    ],
    ids=["setitem", "delitem", "update", "setdefault", "pop", "popitem", "clear", "ior", "nested-dict", "dict-in-list"],
)
def test_nested_dicts_cannot_be_mutated(mutate):
    task = nested_task()
    with pytest.raises(TypeError, match="frozen Task cannot be modified"):
        mutate(task["info"])
    assert task["info"] == {"tags": ["math", {"level": 1}], "meta": {"source": "gsm"}}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda tags: tags.append("x"),
        lambda tags: tags.extend(["x"]),
        lambda tags: tags.insert(0, "x"),
        lambda tags: tags.pop(),
        lambda tags: tags.remove("math"),
        lambda tags: tags.clear(),
        lambda tags: tags.sort(key=str),
        lambda tags: tags.reverse(),
        lambda tags: tags.__setitem__(0, "x"),
        lambda tags: tags.__delitem__(0),
        lambda tags: tags.__iadd__(["x"]),
        lambda tags: tags.__imul__(2),
    ],
    ids=["append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "setitem", "delitem", "iadd", "imul"],
)
def test_nested_lists_cannot_be_mutated(mutate):
    task = nested_task()
    with pytest.raises(TypeError, match="frozen Task cannot be modified"):
        mutate(task["info"]["tags"])
    assert task["info"]["tags"] == ["math", {"level": 1}]


def test_augmented_assignment_on_a_nested_list_is_refused():
    task = nested_task()
    tags = task["info"]["tags"]
    with pytest.raises(TypeError, match="frozen Task cannot be modified"):
        tags += ["x"]
    assert task["info"]["tags"] == ["math", {"level": 1}]


def test_prompt_messages_are_frozen():
    task = nested_task()
    with pytest.raises(TypeError):
        task["prompt"][0]["content"] = "changed"
    with pytest.raises(TypeError):
        task["prompt"].append({"role": "user", "content": "more"})
    assert task["prompt"] == [{"role": "user", "content": "What is 2+2?"}]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda task: task.__setitem__("answer", "5"),
        lambda task: task.__delitem__("answer"),
        lambda task: task.update(answer="5"),
        lambda task: task.setdefault("new", 1),
        lambda task: task.pop("answer"),
        lambda task: task.popitem(),
        lambda task: task.clear(),
        lambda task: task.__ior__({"answer": "5"}),
    ],
    ids=["setitem", "delitem", "update", "setdefault", "pop", "popitem", "clear", "ior"],
)
def test_frozen_task_top_level_cannot_be_mutated(mutate):
    task = nested_task().freeze()
    assert task.frozen
    with pytest.raises(TypeError, match="frozen Task cannot be modified"):
        mutate(task)
    assert task["answer"] == "4"
    assert set(task) == {"prompt", "answer", "info"}


def test_unfrozen_task_can_be_edited_and_new_values_are_validated_and_frozen():
    task = v1.Task(prompt="hi")
    assert not task.frozen
    task["info"] = {"xs": [1, 2]}
    assert isinstance(task["info"], FrozenDict)
    assert isinstance(task["info"]["xs"], FrozenList)
    with pytest.raises(TypeError):
        task["info"]["xs"].append(3)
    with pytest.raises(v1.TaskError, match=r"field 'info\.bad'"):
        task["info"] = {"bad": object()}
    with pytest.raises(v1.TaskError, match="field 'runtime'"):
        task.update(runtime={})
    assert task.freeze() is task


def test_frozen_values_are_plain_json_and_compare_equal_to_plain_values():
    plain = {
        "prompt": [{"role": "user", "content": "What is 2+2?"}],
        "answer": "4",
        "info": {"tags": ["math", {"level": 1}], "meta": {"source": "gsm"}},
    }
    task = nested_task().freeze()
    assert task == plain
    assert isinstance(task, dict)
    assert isinstance(task["info"], dict)
    assert isinstance(task["info"]["tags"], list)
    assert task["info"]["tags"] == ["math", {"level": 1}]
    assert json.loads(json.dumps(task)) == plain
    assert json.dumps(task, sort_keys=True) == json.dumps(plain, sort_keys=True)


def test_tuples_become_frozen_lists():
    task = v1.Task(info={"pair": (1, 2)})
    assert task["info"]["pair"] == [1, 2]
    assert isinstance(task["info"]["pair"], FrozenList)


def test_thaw_returns_a_mutable_deep_copy():
    task = nested_task().freeze()
    plain = thaw(task)
    plain["info"]["tags"].append("more")
    plain["info"]["meta"]["source"] = "other"
    assert type(plain["info"]) is dict
    assert type(plain["info"]["tags"]) is list
    assert task["info"]["tags"] == ["math", {"level": 1}]
    assert task["info"]["meta"]["source"] == "gsm"


def test_thaw_makes_any_mapping_a_dict_and_leaves_leaves_and_tuples_alone():
    proxy = types.MappingProxyType({"a": FrozenList([FrozenDict({"b": 1.5})]), "t": (1, "x"), "n": None})
    plain = thaw(proxy)
    assert plain == {"a": [{"b": 1.5}], "t": (1, "x"), "n": None}
    assert type(plain) is dict and type(plain["a"]) is list and type(plain["a"][0]) is dict
    assert thaw("text") == "text" and thaw(True) is True and thaw(None) is None


@pytest.mark.parametrize("roundtrip", [lambda t: pickle.loads(pickle.dumps(t)), copy.deepcopy, copy.copy])
def test_copy_and_pickle_round_trip_keeps_data_and_frozenness(roundtrip):
    task = nested_task().freeze()
    clone = roundtrip(task)
    assert type(clone) is v1.Task
    assert clone == task
    assert clone.frozen
    assert isinstance(clone["info"], FrozenDict)
    assert isinstance(clone["info"]["tags"], FrozenList)
    with pytest.raises(TypeError):
        clone["info"]["tags"].append("x")
    with pytest.raises(TypeError):
        clone["answer"] = "5"


def test_pickle_round_trip_of_an_unfrozen_task_stays_unfrozen():
    clone = pickle.loads(pickle.dumps(v1.Task(prompt="hi")))
    assert not clone.frozen
    clone["answer"] = "x"
    assert clone["answer"] == "x"


def test_frozen_containers_pickle_on_their_own():
    frozen_dict = pickle.loads(pickle.dumps(FrozenDict({"a": 1})))
    frozen_list = pickle.loads(pickle.dumps(FrozenList([1, 2])))
    assert type(frozen_dict) is FrozenDict and frozen_dict == {"a": 1}
    assert type(frozen_list) is FrozenList and frozen_list == [1, 2]


# -- JSON-only values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"info": {"x": object()}}, r"field 'info\.x': object value .* is not JSON-serializable"),
        ({"info": {"xs": [1, {"deep": {1, 2}}]}}, r"field 'info\.xs\[1\]\.deep': set value"),
        ({"answer": float("nan")}, r"field 'answer': nan is not valid JSON \(NaN and infinity are not allowed\)"),
        ({"info": {"score": float("inf")}}, r"field 'info\.score': inf is not valid JSON"),
        ({"info": {1: "one"}}, r"field 'info': key 1 is not a string; JSON objects need string keys"),
        ({"info": {"nested": {("a",): 1}}}, r"field 'info\.nested': key \('a',\) is not a string"),
        ({"extra": b"bytes"}, r"field 'extra': bytes value"),
        ({"info": {"a": [{"b": [0, {"c": {1}}]}]}}, r"field 'info\.a\[0\]\.b\[1\]\.c': set value"),
        ({"info": {"xs": [[], {2: 1}]}}, r"field 'info\.xs\[1\]': key 2 is not a string"),
        ({"prompt": [{"role": "user", "content": float("-inf")}]}, r"field 'prompt\[0\]\.content': -inf is not valid JSON"),
        ({"info": {"a": {1}, 2: "x"}}, r"field 'info\.a': set value"),
        ({"info": {"a": 1, 2: {1}}}, r"field 'info': key 2 is not a string"),
    ],
    ids=[
        *("object", "set-in-list", "nan", "inf", "int-key", "tuple-key", "bytes"),
        *("deep-path", "key-in-list", "in-prompt", "bad-value-before-bad-key", "bad-key-before-bad-value"),
    ],
)
def test_non_json_values_are_rejected_with_the_field_path(data, pattern):
    with pytest.raises(v1.TaskError, match=pattern):
        v1.Task(data)


def test_task_error_is_a_v1_error_and_a_value_error():
    with pytest.raises(v1.Error):
        v1.Task(info={"x": object()})
    with pytest.raises(ValueError):
        v1.Task(info={"x": object()})


def test_where_prefixes_every_error():
    with pytest.raises(v1.TaskError, match=r"^row 3: field 'info\.x'"):
        v1.Task({"info": {"x": object()}}, where="row 3")
    with pytest.raises(v1.TaskError, match=r"^gsm8k row 7: field 'prompt\[0\]': system messages are not allowed"):
        v1.Task({"prompt": [{"role": "system", "content": "be nice"}]}, where="gsm8k row 7")
    with pytest.raises(v1.TaskError, match=r"^row 1: field 'max_turns'"):
        v1.Task({"max_turns": 0}, where="row 1")
    with pytest.raises(v1.TaskError, match=r"^row 2: field 'runtime'"):
        v1.Task({"runtime": {}}, where="row 2")
    with pytest.raises(v1.TaskError, match=r"^row 4: field 'info': expected a mapping"):
        v1.Task({"info": "text"}, where="row 4")


def test_errors_without_where_start_with_the_field():
    with pytest.raises(v1.TaskError, match=r"^field 'info\.x'"):
        v1.Task(info={"x": object()})


# -- prompt ------------------------------------------------------------------------------


def test_string_prompt_becomes_one_user_message():
    task = v1.Task(prompt="What is 2+2?")
    assert task["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert task.prompt == [{"role": "user", "content": "What is 2+2?"}]


def test_prompt_property_is_empty_without_a_prompt():
    assert v1.Task(answer="4").prompt == []


def test_allowed_prompt_roles_are_kept():
    messages = [
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "tool_calls": [{"id": "1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "1", "content": "t"},
    ]
    assert v1.Task(prompt=messages)["prompt"] == messages


def test_system_message_in_prompt_is_refused():
    with pytest.raises(v1.TaskError, match=r"field 'prompt\[1\]': system messages are not allowed in a task prompt"):
        v1.Task(prompt=[{"role": "user", "content": "hi"}, {"role": "system", "content": "be nice"}])


def test_unknown_role_is_refused():
    with pytest.raises(v1.TaskError, match=r"field 'prompt\[0\]\.role': unknown role 'robot'"):
        v1.Task(prompt=[{"role": "robot", "content": "beep"}])


@pytest.mark.parametrize(
    ("prompt", "pattern"),
    [
        (42, r"field 'prompt': expected a string or a list of messages, got int"),
        ([{"content": "no role"}], r"field 'prompt\[0\]': expected a message dict with a 'role'"),
        (["just a string"], r"field 'prompt\[0\]': expected a message dict with a 'role'"),
    ],
)
def test_malformed_prompt_is_refused(prompt, pattern):
    with pytest.raises(v1.TaskError, match=pattern):
        v1.Task(prompt=prompt)


def test_system_prompt_accepts_a_string_or_system_messages():
    assert v1.Task(system_prompt="be brief")["system_prompt"] == "be brief"
    messages = [{"role": "system", "content": "be brief"}]
    assert v1.Task(system_prompt=messages)["system_prompt"] == messages


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ([{"role": "user", "content": "x"}], r"field 'system_prompt\[0\]': expected a system message dict"),
        (3, r"field 'system_prompt': expected a string or a list of system messages, got int"),
    ],
)
def test_bad_system_prompt_is_refused(value, pattern):
    with pytest.raises(v1.TaskError, match=pattern):
        v1.Task(system_prompt=value)


# -- other fields ------------------------------------------------------------------------


@pytest.mark.parametrize("max_turns", [0, -1, "3", 2.5, True])
def test_max_turns_must_be_a_positive_int(max_turns):
    with pytest.raises(v1.TaskError, match=r"field 'max_turns': expected a positive integer, got"):
        v1.Task(max_turns=max_turns)


def test_positive_max_turns_and_none_are_kept():
    assert v1.Task(max_turns=3)["max_turns"] == 3
    assert v1.Task(max_turns=None)["max_turns"] is None


@pytest.mark.parametrize("name", ["info", "tools", "toolsets", "sandbox", "program"])
def test_mapping_fields_must_be_mappings(name):
    with pytest.raises(v1.TaskError, match=rf"field '{name}': expected a mapping( or a program name)?, got list"):
        v1.Task({name: ["a"]})
    assert v1.Task({name: {"a": 1}})[name] == {"a": 1}
    assert v1.Task({name: None})[name] is None


def test_runtime_is_refused():
    with pytest.raises(v1.TaskError, match="field 'runtime' is not part of a task; runtime data belongs on State"):
        v1.Task(runtime={"model": "x"})


def test_keyword_fields_override_the_mapping():
    task = v1.Task({"answer": "4", "info": {"a": 1}}, answer="5")
    assert task == {"answer": "5", "info": {"a": 1}}


def test_unknown_json_fields_are_kept():
    task = v1.Task(custom={"k": [1, 2.5, None, True, "s"]})
    assert task["custom"] == {"k": [1, 2.5, None, True, "s"]}


def test_task_does_not_alias_its_input():
    info = {"xs": [1]}
    task = v1.Task(info=info)
    info["xs"].append(2)
    info["new"] = True
    assert task["info"] == {"xs": [1]}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"max_input_tokens": 0}, "field 'max_input_tokens': expected a positive integer up to"),
        ({"max_output_tokens": True}, "field 'max_output_tokens': expected a positive integer up to"),
        ({"max_total_tokens": 2**80}, "field 'max_total_tokens': expected a positive integer up to"),
        ({"tools": ["add"]}, "field 'tools': expected a mapping, got list"),
        ({"toolsets": "math"}, "field 'toolsets': expected a mapping, got str"),
        ({"sandbox": 1}, "field 'sandbox': expected a mapping, got int"),
        ({"program": 3}, "field 'program': expected a mapping or a program name, got int"),
        ({"prompt": "x", "answer": "4", "max_turns": 1, "sandbox": 1}, "field 'sandbox'"),  # beside valid fields
    ],
)
def test_every_typed_field_is_checked(row: dict, message: str) -> None:
    with pytest.raises(v1.TaskError, match=re.escape(f"row 5: {message}")):
        v1.Task(row, where="row 5")


def test_a_row_without_typed_fields_is_kept_as_it_is() -> None:
    task = v1.Task({"prompt": "hi", "answer": "4", "extra": [1, {"a": None}]})
    assert task == {"prompt": [{"role": "user", "content": "hi"}], "answer": "4", "extra": [1, {"a": None}]}
