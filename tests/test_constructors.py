"""Constructors of the v1 API: keyword-only after their first one or two parameters, each with a real type."""

from __future__ import annotations

import inspect
import re

import pytest

import v1 as vf
from harnesses.agent import AgentHarness
from v1.testing import Reply

# The positional parameters each constructor keeps: the call forms of seed 001 and the docs.
POSITIONAL = {
    vf.Harness: ["program"],
    vf.Taskset: ["source", "eval_source"],
    vf.Toolset: ["tools"],
    vf.Env: ["taskset", "harness"],
    vf.User: ["fn"],
    vf.MCPTool: ["command", "args"],
    vf.ResultsWriter: ["path", "extra_metadata"],
    Reply: ["content"],
}

UNTYPED = re.compile(r"^(Any|object)( \| None)?$|^Iterable\[Any\]( \| None)?$")


def positional_parameters(cls: type) -> list[str]:
    parameters = list(inspect.signature(cls).parameters.values())
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize("cls", list(POSITIONAL), ids=lambda cls: cls.__name__)
def test_only_the_first_parameters_are_positional(cls: type) -> None:
    assert positional_parameters(cls) == POSITIONAL[cls]


@pytest.mark.parametrize("cls", [vf.Harness, vf.Taskset, vf.Toolset, vf.User, vf.MCPTool], ids=lambda cls: cls.__name__)
def test_no_parameter_is_typed_any(cls: type) -> None:
    annotations = {
        name: str(p.annotation) for name, p in inspect.signature(cls).parameters.items() if p.kind is not p.VAR_KEYWORD
    }
    untyped = {name: annotation for name, annotation in annotations.items() if UNTYPED.match(annotation)}
    assert untyped == {}


def test_a_subclass_keeps_the_keyword_only_form() -> None:
    assert positional_parameters(AgentHarness) == ["config"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: vf.Harness(None, "You are terse."), "takes from 1 to 2 positional arguments but 3 were given"),
        (lambda: vf.Taskset([{"prompt": "p"}], None, "my_id"), "takes from 1 to 3 positional arguments but 4 were given"),
        (lambda: vf.Toolset([], ["shown"]), "takes from 1 to 2 positional arguments but 3 were given"),
        (lambda: vf.MCPTool("python", ["-m", "x"], {"A": "1"}), "takes from 1 to 3 positional arguments but 4 were given"),
        (lambda: Reply("hi", []), "takes from 1 to 2 positional arguments but 3 were given"),
    ],
)
def test_a_positional_argument_past_them_is_refused_by_python(build, message) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        build()


def test_the_keyword_forms_build_what_the_positional_ones_did() -> None:
    rows = [{"prompt": "hello", "answer": "olleh"}]
    taskset = vf.Taskset(rows, rows, taskset_id="pairs", system_prompt="Reverse it.")
    assert taskset.taskset_id == "pairs" and taskset.system_prompt == "Reverse it."
    assert len(taskset.rows()) == len(taskset.eval_rows()) == 1
    harness = vf.Harness({"base": True}, system_prompt="Be brief.", max_turns=3, sandbox={"memory_gb": 1})
    assert harness.config.max_turns == 3 and harness.config.sandbox is not None and harness.config.sandbox.memory_gb == 1
    assert vf.MCPTool("python", ["-m", "srv"], env={"A": "1"}).config.env == {"A": "1"}
    assert Reply("hi", finish_reason="length").finish_reason == "length"


@pytest.mark.parametrize(
    ("build", "pattern"),
    [
        (lambda: vf.Harness(sandbox={"memory_gb": -1}), "field 'sandbox.memory_gb'"),
        (lambda: vf.Harness(program=42), "field 'program': Input should be callable"),
        (lambda: vf.Toolset(sandbox="elsewhere"), "expected 'program', a SandboxConfig or a mapping of one, got 'elsewhere'"),
        (lambda: vf.User(lambda messages: "ok", sandbox=["x"]), "expected 'program', a SandboxConfig or a mapping of one"),
        (lambda: vf.Taskset(user={"bindings": {}}), "a user config needs fn"),
    ],
)
def test_a_value_outside_the_types_is_one_config_error(build, pattern) -> None:
    with pytest.raises(vf.ConfigError, match=pattern):
        build()
