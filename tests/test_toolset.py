"""`v1.Toolset`: schemas from signatures, and tool calls that never crash the rollout."""

from __future__ import annotations

import functools
import json
import threading
from enum import IntEnum
from typing import Literal, Optional

import jsonschema
import pytest
from pydantic import BaseModel

import v1
from v1.tools import ToolFunction, merge_toolsets, render_tool_result


class Point(BaseModel):
    x: int
    y: int


def search(
    query: str,
    mode: Literal["fast", "thorough"] = "fast",
    limit: Optional[int] = None,  # noqa: UP045 (the schema of Optional is under test)
    tags: list[str] = [],  # noqa: B006
    origin: Point | None = None,
) -> str:
    """Search the corpus.

    Returns the best matching passage.

    Args:
        query: what to look for
        mode: how hard to look
    """
    return f"{query}|{mode}|{limit}|{tags}|{origin!r}"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def async_echo(text: str) -> str:
    """Echo the text back."""
    return text


def where_am_i() -> str:
    return "worker" if threading.current_thread() is not threading.main_thread() else "main"


def explode(reason: str) -> str:
    raise RuntimeError(f"exploded: {reason}")


class FatalToolError(Exception):
    pass


def fatal() -> str:
    raise FatalToolError("cannot continue")


NOT_A_TOOL = 42


# -- schemas -----------------------------------------------------------------------------


def schema_of(fn) -> dict:
    return v1.Toolset([fn]).tools[0].parameters


def test_tool_name_and_description_come_from_the_function():
    tool = v1.Toolset([search]).tools[0]
    assert isinstance(tool, v1.Tool)
    assert tool.name == "search"
    assert tool.description == "Search the corpus.\n\nReturns the best matching passage."


def test_schema_basics_and_required_arguments():
    schema = schema_of(search)
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == ["query", "mode", "limit", "tags", "origin"]
    assert "title" not in schema
    assert all("title" not in prop for prop in schema["properties"].values())


def test_schema_descriptions_come_from_the_docstring_args():
    properties = schema_of(search)["properties"]
    assert properties["query"]["description"] == "what to look for"
    assert properties["mode"]["description"] == "how hard to look"
    assert "description" not in properties["limit"]


def test_schema_literal_becomes_enum_with_default():
    mode = schema_of(search)["properties"]["mode"]
    assert mode["enum"] == ["fast", "thorough"]
    assert mode["type"] == "string"
    assert mode["default"] == "fast"


def test_schema_optional_allows_null():
    limit = schema_of(search)["properties"]["limit"]
    assert {"type": "integer"} in limit["anyOf"]
    assert {"type": "null"} in limit["anyOf"]
    assert limit["default"] is None


def test_schema_list_of_strings():
    tags = schema_of(search)["properties"]["tags"]
    assert tags == {"type": "array", "items": {"type": "string"}, "default": []}


def test_schema_pydantic_model_argument():
    schema = schema_of(search)
    origin = schema["properties"]["origin"]
    refs = [option.get("$ref") for option in origin["anyOf"]]
    assert "#/$defs/Point" in refs
    assert schema["$defs"]["Point"]["properties"]["x"]["type"] == "integer"
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]


def test_schema_without_arguments():
    schema = schema_of(where_am_i)
    assert schema["properties"] == {}
    assert "required" not in schema
    assert v1.Toolset([where_am_i]).tools[0].description == ""


def test_schema_is_json():
    """Each tool survives a JSON round trip unchanged, and its parameters are a JSON Schema that accepts a real call."""
    tools = [tool.model_dump() for tool in v1.Toolset([search, add, async_echo]).tools]
    assert json.loads(json.dumps(tools)) == tools  # no tuples, sets or non-string keys hiding in the dump
    calls = {
        "search": {"query": "q", "mode": "thorough", "limit": 3, "tags": ["a"], "origin": {"x": 1, "y": 2}},
        "add": {"a": 1, "b": 2},
        "async_echo": {"text": "hi"},
    }
    assert [tool["name"] for tool in tools] == list(calls)
    for tool in tools:
        validator = jsonschema.Draft202012Validator(tool["parameters"])
        validator.check_schema(tool["parameters"])
        assert validator.is_valid(calls[tool["name"]]), tool["name"]
        assert not validator.is_valid({**calls[tool["name"]], "unexpected": 1}), tool["name"]
    search_schema = jsonschema.Draft202012Validator(tools[0]["parameters"])
    assert not search_schema.is_valid({"query": "q", "mode": "slow"})  # the Literal became an enum
    assert not search_schema.is_valid({"mode": "fast"})  # query is required


def test_unannotated_arguments_accept_anything():
    def loose(value):
        return value

    assert schema_of(loose)["required"] == ["value"]


def test_lambda_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="a tool needs a named function"):
        v1.Toolset([lambda x: x])


def test_unnamed_callable_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="a tool needs a named function"):
        v1.Toolset([functools.partial(add, 1)])


def test_var_positional_is_a_config_error():
    def many(*values: int) -> int:
        return sum(values)

    with pytest.raises(v1.ConfigError, match=r"tool 'many': \*args/\*\*kwargs can't be described to a model"):
        v1.Toolset([many])


def test_var_keyword_is_a_config_error():
    def options(**values: int) -> int:
        return 0

    with pytest.raises(v1.ConfigError, match=r"tool 'options': \*args/\*\*kwargs"):
        v1.Toolset([options])


def test_unresolvable_type_hint_is_a_config_error():
    def broken(value: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(v1.ConfigError, match="tool 'broken': cannot resolve its type hints"):
        v1.Toolset([broken])


def test_duplicate_tool_names_are_a_config_error():
    def add(a: int) -> int:  # same name as the module-level tool
        return a

    with pytest.raises(v1.ConfigError, match="two tools are named 'add' in one toolset"):
        v1.Toolset([globals()["add"], add])


def test_merge_toolsets_maps_names_to_owners():
    first, second = v1.Toolset([add]), v1.Toolset([async_echo, search])
    owners = merge_toolsets([first, second])
    assert owners == {"add": first, "async_echo": second, "search": second}


def test_merge_toolsets_collision_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="tool 'add' is defined by two toolsets"):
        merge_toolsets([v1.Toolset([add]), v1.Toolset([async_echo]), v1.Toolset([add])])


# -- references --------------------------------------------------------------------------


def test_tools_given_as_refs():
    toolset = v1.Toolset([f"{__name__}:add", f"{__name__}:async_echo"])
    assert [tool.name for tool in toolset.tools] == ["add", "async_echo"]
    assert toolset.functions["add"].fn is add
    assert toolset.functions["async_echo"].fn is async_echo


def test_tools_from_config_refs_come_first():
    toolset = v1.Toolset([async_echo], config={"tools": [f"{__name__}:add"]})
    assert [tool.name for tool in toolset.tools] == ["add", "async_echo"]
    toolset = v1.Toolset(config=v1.ToolsetConfig(tools=[f"{__name__}:search"]))
    assert [tool.name for tool in toolset.tools] == ["search"]


def test_bad_tool_ref_is_a_config_error():
    with pytest.raises(v1.ConfigError, match=r"field 'tools\[0\]': module '.*' has no attribute 'missing'"):
        v1.Toolset([f"{__name__}:missing"])
    with pytest.raises(v1.ConfigError, match=r"field 'tools\[0\]': expected a callable .* got int"):
        v1.Toolset([f"{__name__}:NOT_A_TOOL"])


def test_unknown_toolset_config_field_is_a_config_error():
    with pytest.raises(v1.ConfigError, match="field 'bogus': unknown field"):
        v1.Toolset(config={"bogus": []})


# -- calls -------------------------------------------------------------------------------


async def test_sync_tool_call_runs_in_a_worker_thread():
    toolset = v1.Toolset([add, where_am_i])
    assert await toolset.call("add", '{"a": 2, "b": 3}') == "5"
    assert await toolset.call("where_am_i", "{}") == "worker"


async def test_async_tool_call():
    assert await v1.Toolset([async_echo]).call("async_echo", {"text": "hi"}) == "hi"


async def test_arguments_are_validated_and_converted():
    result = await v1.Toolset([search]).call("search", json.dumps({"query": "q", "tags": ["a"], "origin": {"x": 1, "y": 2}}))
    assert result == "q|fast|None|['a']|Point(x=1, y=2)"


async def test_empty_argument_string_means_no_arguments():
    assert await v1.Toolset([where_am_i]).call("where_am_i", "") == "worker"


async def test_non_string_results_are_rendered_as_json():
    def info() -> dict:
        return {"a": [1, 2]}

    assert await v1.Toolset([info]).call("info", {}) == '{"a": [1, 2]}'


async def test_invalid_json_arguments_return_an_error_message():
    result = await v1.Toolset([add]).call("add", '{"a": 1,')
    assert result.startswith("Error: the arguments for 'add': not valid JSON (")
    assert result.endswith("send a JSON object")


async def test_non_object_arguments_return_an_error_message():
    assert await v1.Toolset([add]).call("add", "[1, 2]") == "Error: the arguments for 'add' must be a JSON object, got list"


async def test_schema_mismatch_returns_invalid_arguments():
    toolset = v1.Toolset([add, search])
    wrong_type = await toolset.call("add", '{"a": "one", "b": 2}')
    assert wrong_type.startswith("Error: invalid arguments for 'add': a: ")
    missing = await toolset.call("add", '{"a": 1}')
    assert missing == "Error: invalid arguments for 'add': b: Field required"
    extra = await toolset.call("add", '{"a": 1, "b": 2, "c": 3}')
    assert extra.startswith("Error: invalid arguments for 'add': c: Extra inputs are not permitted")
    bad_enum = await toolset.call("search", '{"query": "q", "mode": "slow"}')
    assert bad_enum.startswith("Error: invalid arguments for 'search': mode: ")


async def test_unknown_tool_returns_an_error_message():
    result = await v1.Toolset([add, async_echo]).call("subtract", "{}")
    assert result == "Error: unknown tool 'subtract'; available tools: add, async_echo"
    assert await v1.Toolset().call("anything", "{}") == "Error: unknown tool 'anything'; available tools: none"


async def test_raising_tool_returns_the_default_error_format():
    assert await v1.Toolset([explode]).call("explode", {"reason": "bad"}) == "Error: RuntimeError: exploded: bad"


async def test_custom_error_formatter():
    toolset = v1.Toolset([explode], error_formatter=lambda error: f"TOOL FAILED <{error}>")
    assert await toolset.call("explode", {"reason": "x"}) == "TOOL FAILED <exploded: x>"


async def test_stop_errors_are_re_raised():
    toolset = v1.Toolset([fatal, explode], stop_errors=[FatalToolError])
    with pytest.raises(FatalToolError, match="cannot continue"):
        await toolset.call("fatal", {})
    assert await toolset.call("explode", {"reason": "y"}) == "Error: RuntimeError: exploded: y"


async def test_without_stop_errors_every_exception_becomes_a_message():
    assert await v1.Toolset([fatal]).call("fatal", {}) == "Error: FatalToolError: cannot continue"


async def test_tool_function_can_be_called_directly():
    function = ToolFunction.from_callable(add)
    assert await function(a=1, b=2) == 3


def test_render_tool_result():
    assert render_tool_result("text") == "text"
    assert render_tool_result([1, None]) == "[1, null]"
    assert render_tool_result({1, 2}) == "{1, 2}"
    for value in (2, -7, 10**30, True, 1.5, float("nan"), IntEnum("Small", "one")(1)):  # as json.dumps writes each
        assert render_tool_result(value) == json.dumps(value)


async def test_validation_error_raised_inside_a_tool_goes_to_the_error_formatter() -> None:
    from pydantic import BaseModel

    class Strict(BaseModel):
        n: int

    def parse_later(text: str) -> str:
        """Parse text the tool received."""
        return str(Strict.model_validate({"n": text}).n)

    result = await v1.Toolset([parse_later]).call("parse_later", '{"text": "not a number"}')
    assert result.startswith("Error: ValidationError:"), result
    assert "invalid arguments" not in result


# -- bindings, objects, construction errors ---------------------------------------------------


def lookup(key: str, table: dict) -> str:
    """Look a key up."""
    return table.get(key, "?")


def make_table() -> dict:
    return {"a": "A"}


def prepare(state) -> None:
    state["prepared"] = True


def test_bound_arguments_are_left_out_of_the_schema():
    toolset = v1.Toolset([lookup], bindings={"lookup.table": "objects.table"}, objects={"table": make_table})
    assert list(toolset.tools[0].parameters["properties"]) == ["key"]
    assert toolset.tools[0].parameters["required"] == ["key"]


@pytest.mark.parametrize(
    ("bindings", "objects", "message"),
    [
        (
            {"lookup.tabel": "objects.table"},
            {"table": make_table},
            r"binding 'lookup.tabel': tool 'lookup' takes no argument 'tabel'",
        ),
        ({"lookup.table": "objects.tabel"}, {"table": make_table}, r"binding 'lookup.table': 'objects.tabel' does not resolve"),
        ({"lookup.table": "info.table"}, {}, r"binding 'lookup.table': 'info.table' is not a binding path"),
        ({"lookup.table": "objects"}, {}, r"binding 'lookup.table': 'objects' must name one of the objects"),
        ({"lookup.table": "state"}, {}, r"binding 'lookup.table': binding the whole state needs write=True"),
        ({"lookup.table": "tools.nope"}, {}, r"binding 'lookup.table': 'tools.nope' does not resolve"),
        ({"table": "objects.table"}, {"table": make_table}, r"binding 'table': bindings of a toolset are keyed 'tool.argument'"),
        ({"search.table": "task.x"}, {}, r"binding 'search.table': this toolset has no tool 'search'"),
        ({"lookup.table": 42}, {}, r"binding 'lookup.table': expected a path string or a callable, got int"),
        ({"lookup.table": lambda other: 1}, {}, r"binding 'lookup.table': a callable source may only take 'task' and 'state'"),
    ],
)
def test_bad_bindings_fail_at_construction_naming_the_binding(bindings, objects, message):
    with pytest.raises(v1.ConfigError, match=message):
        v1.Toolset([lookup], bindings=bindings, objects=objects)


def test_other_construction_errors():
    with pytest.raises(v1.ConfigError, match=r"Toolset\(sandbox=...\): expected 'program', a SandboxConfig"):
        v1.Toolset([add], sandbox="elsewhere")
    with pytest.raises(v1.ConfigError, match=r"toolset 'm' hide= names unknown tool\(s\) \['sub'\]"):
        v1.Toolset([add], hide=["sub"], name="m")
    with pytest.raises(v1.ConfigError, match="a toolset can't be named 'show'"):
        v1.Toolset([add], name="show")
    with pytest.raises(v1.ConfigError, match=r"field 'toolset.objects.db': module"):
        v1.Toolset([add], objects={"db": f"{__name__}:missing_factory"})
    with pytest.raises(v1.ConfigError, match="field 'scope'"):
        v1.ToolsetConfig(scope="forever")


def test_toolset_config_builds_the_same_toolset(tmp_path):
    path = tmp_path / "toolset.toml"
    path.write_text(
        f"""
name = "lookup"
tools = ["{__name__}:lookup"]
scope = "global"
bindings = {{ "lookup.table" = "objects.table" }}
objects = {{ table = "{__name__}:make_table" }}
setups = ["{__name__}:prepare"]
"""
    )
    toolset = v1.Toolset(config=v1.ToolsetConfig.from_toml(path))
    assert (toolset.name, toolset.scope) == ("lookup", "global")
    assert toolset.object_factories == {"table": make_table}
    assert [(h.kind, h.name) for h in toolset.handlers] == [("setup", "prepare")]


async def test_standalone_call_uses_objects_until_aclose():
    toolset = v1.Toolset([lookup], bindings={"lookup.table": "objects.table"}, objects={"table": make_table})
    assert await toolset.call("lookup", {"key": "a"}) == "A"
    assert toolset.open_scopes == ["standalone"]
    await toolset.aclose()
    assert toolset.open_scopes == []
