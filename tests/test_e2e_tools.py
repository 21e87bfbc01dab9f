"""End to end: toolsets with bindings, objects, scopes and visibility, run by the base loop
against the mock model server over real HTTP."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from typing import Any, Literal

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.testing import MockModelServer, MockRequest, Reply


def answer_after_tools(request: MockRequest) -> Reply:
    """Call `calculate` once, then answer with the tool's result."""
    if request.last_message.get("role") == "tool":
        return Reply.text(f"result {request.last_message['content']}")
    return Reply.tool("calculate", {"op": "add", "a": 1.23456, "b": 2})


class Ledger:
    """A private dependency that counts how it is used and closed."""

    created = 0
    closed = 0

    def __init__(self) -> None:
        type(self).created += 1
        self.entries: list[str] = []
        self.is_closed = False

    def close(self) -> None:
        assert not self.is_closed, "closed twice"
        self.is_closed = True
        type(self).closed += 1


def calculate(op: Literal["add", "mul"], a: float, b: float, precision: int, ledger: Ledger) -> str:
    """Calculate.

    Args:
        op: the operation
        a: the first operand
        b: the second operand
    """
    value = a + b if op == "add" else a * b
    ledger.entries.append(op)
    return f"{value:.{precision}f}"


def make_ledger_type() -> type[Ledger]:
    return type("CountingLedger", (Ledger,), {"created": 0, "closed": 0})


def calculator(ledger_type: type[Ledger], **kwargs: Any) -> vf.Toolset:
    return vf.Toolset(
        [calculate],
        bindings={"calculate.precision": "task.info.precision", "calculate.ledger": "objects.ledger"},
        objects={"ledger": ledger_type},
        name="calculator",
        **kwargs,
    )


async def test_calculator_with_bindings_from_task_and_objects(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = answer_after_tools
    ledger = make_ledger_type()
    harness = make_harness(toolsets=[calculator(ledger)])
    state = await harness.run({"prompt": "1.23456 + 2?", "info": {"precision": 2}})
    assert state["error"] is None
    assert state["completion"][1]["content"] == "3.23"  # precision came from the task
    schema = mock.requests[0].tools[0]["function"]["parameters"]
    assert set(schema["properties"]) == {"op", "a", "b"}  # the model never sees bound arguments
    assert schema["properties"]["op"]["enum"] == ["add", "mul"]
    assert schema["properties"]["a"]["description"] == "the first operand"
    assert (ledger.created, ledger.closed) == (1, 1)
    assert "ledger" not in json.dumps(state)  # objects are not reachable from the state


async def test_rollout_scope_builds_and_closes_one_object_per_rollout(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = answer_after_tools
    ledger = make_ledger_type()
    harness = make_harness(toolsets=[calculator(ledger, scope="rollout")])
    states = await asyncio.gather(*(harness.run({"prompt": "go", "info": {"precision": 1}}) for _ in range(8)))
    assert all(s["error"] is None and s["completion"][1]["content"] == "3.2" for s in states)
    assert (ledger.created, ledger.closed) == (8, 8)
    assert harness.toolsets[0].open_scopes == []


async def test_objects_are_lazy(mock: MockModelServer, make_harness: Any) -> None:
    ledger = make_ledger_type()
    state = await make_harness(toolsets=[calculator(ledger)]).run({"prompt": "no tools needed", "info": {"precision": 1}})
    assert state["stop_condition"] == "no_tools_called"
    assert (ledger.created, ledger.closed) == (0, 0)


async def test_global_scope_builds_one_object_for_fifty_rollouts(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = answer_after_tools
    ledger = make_ledger_type()
    toolset = calculator(ledger, scope="global")
    harness = make_harness(toolsets=[toolset])
    states = await asyncio.gather(*(harness.run({"prompt": "go", "info": {"precision": 0}}) for _ in range(50)))
    assert all(s["completion"][1]["content"] == "3" for s in states)
    assert (ledger.created, ledger.closed) == (1, 0)
    await harness.teardown()
    assert (ledger.created, ledger.closed) == (1, 1)
    await harness.teardown()
    assert ledger.closed == 1


async def test_a_finished_tool_rollout_is_freed_by_reference_counting_not_left_to_the_cyclic_collector(
    mock: MockModelServer, make_harness: Any
) -> None:
    """Each tool holds its context, and each context held the rollout's mapping of its tools: every tool
    rollout's state (which a context holds) and scope objects hung off that cycle until the next collection."""
    mock.responder = answer_after_tools
    ledger = make_ledger_type()
    toolset = vf.Toolset(
        [calculate, add],
        bindings={"calculate.precision": "state.info.precision", "calculate.ledger": "objects.ledger"},
        objects={"ledger": ledger},
        scope="rollout",
    )
    built: list[weakref.ref[Ledger]] = []
    original_init = ledger.__init__

    def recording_init(self: Ledger) -> None:
        original_init(self)
        built.append(weakref.ref(self))

    ledger.__init__ = recording_init  # type: ignore[method-assign]
    harness = make_harness(toolsets=[toolset], timeout_seconds=HANG_S)  # a timer per rollout, around its program
    gc.collect()
    gc.disable()
    try:
        # Several at once: each finds no idle upstream connection and waits for one (a timer per wait).
        states = await asyncio.gather(*(harness.run({"prompt": "go", "info": {"precision": 2}}) for _ in range(4)))
        assert [state["completion"][1]["content"] for state in states] == ["3.23"] * 4  # the state binding resolved
        state_refs = [weakref.ref(state) for state in states]
        del states
        await asyncio.sleep(0)
        assert [ref() for ref in state_refs] == [None] * 4
        assert len(built) == 4 and [ref() for ref in built] == [None] * 4  # each rollout scope's object went with it
    finally:
        gc.enable()


async def test_group_scope_builds_one_object_per_group(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = answer_after_tools
    ledger = make_ledger_type()
    harness = make_harness(toolsets=[calculator(ledger, scope="group")])
    task = vf.Task({"prompt": "go", "info": {"precision": 3}})
    for _ in range(2):
        states = await harness.run_group([task] * 4)
        assert [s["completion"][1]["content"] for s in states] == ["3.235"] * 4
    assert (ledger.created, ledger.closed) == (2, 2)
    await harness.run(task)  # a standalone run is a group of one
    assert (ledger.created, ledger.closed) == (3, 3)


async def test_objects_are_closed_once_when_the_rollout_fails(mock: MockModelServer, make_harness: Any) -> None:
    ledger = make_ledger_type()

    async def program(task: vf.Task, state: vf.State) -> None:
        tools = state.get_tools()
        assert await tools["calculate"](op="mul", a=2, b=3) == "6.0"  # bindings applied for programs too
        raise RuntimeError("program crashed")

    state = await make_harness(program=program, toolsets=[calculator(ledger)]).run({"prompt": "x", "info": {"precision": 1}})
    assert state["error"]["type"] == "RuntimeError" and state["error"]["where"] == "program"
    assert (ledger.created, ledger.closed) == (1, 1)


async def test_object_close_failure_is_recorded(mock: MockModelServer, make_harness: Any) -> None:
    class Leaky:
        async def aclose(self) -> None:
            raise OSError("could not release")

    def use(thing: Leaky) -> str:
        return "used"

    mock.responder = lambda r: Reply.text("ok") if r.last_message.get("role") == "tool" else Reply.tool("use")
    toolset = vf.Toolset([use], bindings={"use.thing": "objects.thing"}, objects={"thing": Leaky})
    state = await make_harness(toolsets=[toolset]).run("go")
    assert state["completion"][1]["content"] == "used"
    assert state["error"] == {"type": "OSError", "message": "could not release", "where": "tools:close"}


# -- execution ---------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


async def test_parallel_tool_calls_run_concurrently_and_results_keep_call_order(mock: MockModelServer, make_harness: Any) -> None:
    arrived = asyncio.Event()

    async def waiter() -> str:
        """Waits until the other tool has started."""
        await asyncio.wait_for(arrived.wait(), HANG_S)  # deadlocks (then times out) if calls run one by one
        return "waited"

    async def signaller() -> str:
        """Lets the waiter go."""
        arrived.set()
        return "signalled"

    mock.script(Reply.tool("waiter").and_tool("signaller").and_tool("add", {"a": 1, "b": 2}), Reply.text("done"))
    state = await make_harness(toolsets=[vf.Toolset([waiter, signaller, add])]).run("go")
    assert [m["content"] for m in state["completion"][1:4]] == ["waited", "signalled", "3"]
    ids = [call["id"] for call in state["completion"][0]["tool_calls"]]
    assert [m["tool_call_id"] for m in state["completion"][1:4]] == ids


async def test_bad_tool_calls_become_readable_tool_errors(mock: MockModelServer, make_harness: Any) -> None:
    calls = (
        Reply.tool("explode", {"reason": "x"})
        .and_tool("add", '{"a": 1,')
        .and_tool("add", {"a": "one", "b": 2})
        .and_tool("nope")
        .and_tool("secret")
    )
    mock.script(calls, Reply.text("done"))

    def secret() -> str:
        """Hidden from the model."""
        return "leaked"

    toolset = vf.Toolset([explode, add, secret], hide=["secret"])
    state = await make_harness(toolsets=[toolset]).run("go")
    assert state["error"] is None and state["stop_condition"] == "no_tools_called"
    results = [m["content"] for m in state["completion"][1:6]]
    assert results[0] == "Error: RuntimeError: exploded: x"
    assert results[1].startswith("Error: the arguments for 'add': not valid JSON (")
    assert results[2].startswith("Error: invalid arguments for 'add': a: ")
    assert results[3] == "Error: unknown tool 'nope'; available tools: add, explode"
    assert results[4] == "Error: unknown tool 'secret'; available tools: add, explode"
    assert [t["function"]["name"] for t in mock.requests[0].tools] == ["explode", "add"]


class Fatal(Exception):
    pass


async def test_stop_errors_end_that_rollout_and_others_finish(mock: MockModelServer, make_harness: Any) -> None:
    def risky(fail: bool) -> str:
        """May fail fatally."""
        if fail:
            raise Fatal("the world ended")
        return "fine"

    def responder(request: MockRequest) -> Reply:
        if request.last_message.get("role") == "tool":
            return Reply.text("done")
        return Reply.tool("risky", {"fail": "FAIL" in request.last_user_text})

    mock.responder = responder
    harness = make_harness(toolsets=[vf.Toolset([risky], stop_errors=[Fatal])])
    states = await harness.run_group([vf.Task({"prompt": "FAIL"}), vf.Task({"prompt": "ok"})])
    assert states[0]["stop_condition"] == "has_error"
    assert states[0]["error"]["where"] == "tool" and "the world ended" in states[0]["error"]["message"]
    assert states[1]["error"] is None and states[1]["completion"][-1]["content"] == "done"


async def test_add_tool_adds_a_dynamic_tool_for_one_rollout(mock: MockModelServer, make_harness: Any) -> None:
    toolset = vf.Toolset([add], name="dynamic")

    def unlock(state: vf.State) -> None:
        def door(code: int) -> str:
            """Open the door."""
            return "open" if code == 42 else "locked"

        state.add_tool("dynamic", door)

    mock.script(Reply.tool("door", {"code": 42}), Reply.text("done"))
    state = await make_harness(toolsets=[toolset], setups=[unlock]).run("go")
    assert [t["function"]["name"] for t in mock.requests[0].tools] == ["add", "door"]
    assert state["completion"][1]["content"] == "open"
    state = await make_harness(toolsets=[toolset]).run("go")  # not in other rollouts
    assert [t["name"] for t in state["tool_defs"]] == ["add"]


async def test_each_rollout_lists_its_tool_definitions_as_a_value_of_its_own_and_as_they_are_now(
    mock: MockModelServer, make_harness: Any
) -> None:
    """A rollout's `tool_defs` are what `Tool.model_dump(exclude_none=True)` gives: a program that changes them
    changes no other rollout's, and a definition changed in place (its schema too) is what the next rollout sees."""
    toolset = vf.Toolset([add])
    harness = make_harness(toolsets=[toolset])
    definition = toolset.functions["add"].tool

    async def spoil(task: Any, state: vf.State) -> None:
        state["tool_defs"][0]["parameters"]["properties"].clear()
        state["tool_defs"][0]["description"] = "spoiled"

    first = await make_harness(toolsets=[toolset], program=spoil).run("go")
    second = await harness.run("go")
    assert first["tool_defs"][0]["description"] == "spoiled"
    assert second["tool_defs"] == [definition.model_dump(exclude_none=True)]
    assert set(second["tool_defs"][0]["parameters"]["properties"]) == {"a", "b"}
    definition.parameters["properties"]["a"]["description"] = "the first"  # in place: the same dict
    third = await harness.run("go")
    assert third["tool_defs"] == [definition.model_dump(exclude_none=True)]
    assert third["tool_defs"][0]["parameters"]["properties"]["a"]["description"] == "the first"
    definition.description = "Add two integers, exactly."
    fourth = await harness.run("go")
    assert fourth["tool_defs"][0]["description"] == "Add two integers, exactly."
    assert mock.requests[-1].tools[0]["function"]["description"] == "Add two integers, exactly."


# -- visibility ----------------------------------------------------------------------------


def sub(a: int, b: int) -> int:
    """Subtract."""
    return a - b


def shout(text: str) -> str:
    """Shout."""
    return text.upper()


@pytest.fixture
def two_toolsets(make_harness: Any) -> vf.Harness:
    return make_harness(toolsets=[vf.Toolset([add, sub], name="math"), vf.Toolset([shout], name="text")])


@pytest.mark.parametrize(
    ("visibility", "expected"),
    [
        ({}, ["add", "sub", "shout"]),
        ({"toolsets": {"hide": ["math"]}}, ["shout"]),
        ({"toolsets": {"show": ["math"]}}, ["add", "sub"]),
        ({"tools": {"math": {"show": ["add"]}}}, ["add", "shout"]),
        ({"tools": {"math": {"hide": ["add"]}, "text": {"hide": ["shout"]}}}, ["sub"]),
        ({"tools": {"hide": ["sub"]}}, ["add", "shout"]),
        ({"tools": {"show": ["shout"]}}, ["shout"]),
    ],
)
async def test_per_task_visibility(
    mock: MockModelServer, two_toolsets: vf.Harness, visibility: dict[str, Any], expected: list[str]
) -> None:
    state = await two_toolsets.run({"prompt": "x", **visibility})
    assert state["error"] is None
    assert [t["function"]["name"] for t in mock.requests[-1].tools] == expected
    assert sorted(state["tool_defs"][i]["name"] for i in range(len(expected))) == sorted(expected)


async def test_a_call_to_a_hidden_tool_is_a_tool_error(mock: MockModelServer, two_toolsets: vf.Harness) -> None:
    mock.script(Reply.tool("shout", {"text": "hi"}), Reply.text("done"))
    state = await two_toolsets.run({"prompt": "x", "toolsets": {"hide": ["text"]}})
    assert state["completion"][1]["content"] == "Error: unknown tool 'shout'; available tools: add, sub"


@pytest.mark.parametrize(
    ("visibility", "message"),
    [
        ({"toolsets": {"show": ["nope"]}}, "task field 'toolsets' names unknown toolset(s) ['nope']"),
        ({"tools": {"math": {"show": ["shout"]}}}, "task field 'tools.math' names unknown tool(s) ['shout']"),
        ({"tools": {"nope": {"show": ["x"]}}}, "task field 'tools.nope': no visible toolset named 'nope'"),
        ({"tools": {"math": {"only": ["add"]}}}, "task field 'tools.math': unknown key(s) ['only']"),
    ],
)
async def test_bad_visibility_is_recorded_on_that_rollout(
    mock: MockModelServer, two_toolsets: vf.Harness, visibility: dict[str, Any], message: str
) -> None:
    state = await two_toolsets.run({"prompt": "x", **visibility})
    assert state["error"]["type"] == "ConfigError" and state["error"]["where"] == "task"
    assert message in state["error"]["message"]
    assert state["trajectory"] == []


async def test_rollout_local_toolset_config_is_not_supported_yet(mock: MockModelServer, two_toolsets: vf.Harness) -> None:
    state = await two_toolsets.run({"prompt": "x", "toolsets": {"extra": {"tools": []}}})
    assert state["error"]["type"] == "NotSupportedError"
    assert "rollout-local toolset config (['extra']) is not supported yet" in state["error"]["message"]


def test_tool_and_toolset_name_collisions_fail_at_construction(make_harness: Any) -> None:
    taskset = vf.Taskset(source=[{"prompt": "x"}], toolsets=[vf.Toolset([add], name="math")])
    with pytest.raises(vf.ConfigError, match="tool 'add' is defined by two toolsets"):
        make_harness(toolsets=[vf.Toolset([add])], taskset=taskset)
    with pytest.raises(vf.ConfigError, match="two toolsets are named 'math'"):
        make_harness(toolsets=[vf.Toolset([sub], name="math")], taskset=taskset)
    with pytest.raises(vf.ConfigError, match="tool 'sub' is defined by two toolsets"):
        vf.Taskset(toolsets=[vf.Toolset([sub]), vf.Toolset([sub])])


async def test_a_binding_never_leaks_into_another_toolset(mock: MockModelServer, make_harness: Any) -> None:
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    def same_named_setup(state: vf.State, key: str = "handler default") -> None:
        state["handler_key"] = key

    same_named_setup.__name__ = "lookup"  # a handler with the bound tool's name
    bound = vf.Toolset([lookup], bindings={"lookup.key": "task.info.key"})
    plain = vf.Toolset([lookup])
    mock.script(Reply.tool("lookup"), Reply.text("done"), Reply.tool("lookup", {"key": "model's"}), Reply.text("done"))
    first = await make_harness(toolsets=[bound], setups=[same_named_setup]).run({"prompt": "x", "info": {"key": "task's"}})
    assert first["handler_key"] == "handler default"
    second = await make_harness(toolsets=[plain]).run({"prompt": "x", "info": {"key": "task's"}})
    assert first["completion"][1]["content"] == "value of task's"
    assert second["completion"][1]["content"] == "value of model's"
    assert mock.requests[0].tools[0]["function"]["parameters"]["properties"] == {}
    assert list(mock.requests[2].tools[0]["function"]["parameters"]["properties"]) == ["key"]


async def test_bindings_from_state_tools_and_callables(mock: MockModelServer, make_harness: Any) -> None:
    async def double(n: int) -> int:
        """Double."""
        return 2 * n

    async def report(n: int, seen: list[str], doubler: Any, tag: str, state: vf.State) -> str:
        """Report."""
        state["reported"] = True  # the live state: this toolset has write=True
        return f"{tag}:{await doubler(n=n)}:{seen}"

    toolset = vf.Toolset(
        [double, report],
        bindings={
            "report.seen": "state.seen",
            "report.doubler": "tools.double",
            "report.tag": lambda task: task["info"]["tag"],
            "report.state": "state",
        },
        write=True,
    )

    def remember(state: vf.State) -> None:
        state["seen"] = ["a"]

    mock.script(Reply.tool("report", {"n": 4}), Reply.text("done"))
    state = await make_harness(toolsets=[toolset], setups=[remember]).run({"prompt": "x", "info": {"tag": "T"}})
    assert state["completion"][1]["content"] == "T:8:['a']"
    assert state["reported"] is True


async def test_a_binding_that_does_not_resolve_at_run_time_is_a_tool_error(mock: MockModelServer, make_harness: Any) -> None:
    mock.script(Reply.tool("calculate", {"op": "add", "a": 1, "b": 1}), Reply.text("done"))
    state = await make_harness(toolsets=[calculator(make_ledger_type())]).run({"prompt": "x", "info": {}})
    assert state["completion"][1]["content"] == (
        "Error: ToolError: binding 'calculate.precision': 'task.info.precision' does not resolve "
        "(nothing at 'task.info.precision')"
    )


async def test_toolset_lifecycle_handlers_run_in_the_rollout(mock: MockModelServer, make_harness: Any) -> None:
    class Workspace(vf.Toolset):
        @vf.cleanup
        def tidy(self, state: vf.State) -> None:
            state["tidied"] = True

    def prepare(state: vf.State) -> None:
        state["prepared"] = True

    def finished(state: vf.State) -> bool:
        return bool(state["trajectory"])

    toolset = Workspace([add], setups=[prepare], stops=[finished])
    assert toolset.name == "Workspace"
    mock.responder = Reply.tool("add", {"a": 1, "b": 1})
    state = await make_harness(toolsets=[toolset]).run("go")
    assert (state["prepared"], state["tidied"], state["stop_condition"]) == (True, True, "finished")
    assert len(state["trajectory"]) == 1


async def test_a_child_rollout_gets_the_tools_it_borrows(mock: MockModelServer, make_harness: Any) -> None:
    child_harness = make_harness()

    async def parent_program(task: vf.Task, state: vf.State) -> None:
        child = state.for_task(vf.Task({"prompt": "child"}), borrow=["model"], tools=["calculate"])
        child = await child_harness.run(child.task, child)
        state["child_result"] = child["completion"][1]["content"]

    mock.script(Reply.tool("calculate", {"op": "mul", "a": 2, "b": 4}), Reply.text("done"))
    ledger = make_ledger_type()
    state = await make_harness(program=parent_program, toolsets=[calculator(ledger)]).run(
        {"prompt": "parent", "info": {"precision": 1}}
    )
    assert state["child_result"] == "8.0"  # bound to the parent's task and objects
    assert mock.requests[0].tools[0]["function"]["name"] == "calculate"
    assert (ledger.created, ledger.closed) == (1, 1)


async def test_without_write_tools_get_copies_of_state_values(mock: MockModelServer, make_harness: Any) -> None:
    def collect(item: str, basket: list[str]) -> str:
        """Put an item in the basket."""
        basket.append(item)
        return f"{len(basket)} items"

    def fill(state: vf.State) -> None:
        state["basket"] = ["apple"]

    mock.script(Reply.tool("collect", {"item": "pear"}), Reply.tool("collect", {"item": "fig"}), Reply.text("done"))
    reader = vf.Toolset([collect], bindings={"collect.basket": "state.basket"})
    state = await make_harness(toolsets=[reader], setups=[fill]).run("go")
    assert [m["content"] for m in state["completion"] if m["role"] == "tool"] == ["2 items", "2 items"]
    assert state["basket"] == ["apple"]

    mock.script(Reply.tool("collect", {"item": "pear"}), Reply.tool("collect", {"item": "fig"}), Reply.text("done"))
    writer = vf.Toolset([collect], bindings={"collect.basket": "state.basket"}, write=True)
    state = await make_harness(toolsets=[writer], setups=[fill]).run("go")
    assert state["basket"] == ["apple", "pear", "fig"]


async def test_a_harness_without_tools_still_applies_the_rows_visibility(mock: MockModelServer, make_harness: Any) -> None:
    # A harness with no toolsets and no user skips the toolset walk; a row's visibility fields must still be checked.
    harness = make_harness()
    plain = await harness.run({"prompt": "x"})
    assert plain["error"] is None and plain["tool_defs"] == [] and not mock.requests[-1].tools
    for row, message in [
        ({"tools": {"show": ["nope"]}}, "task field 'tools' names unknown tool(s) ['nope']"),
        ({"toolsets": {"show": ["nope"]}}, "task field 'toolsets' names unknown toolset(s) ['nope']"),
        ({"toolsets": {"only": ["x"]}}, "rollout-local toolset config (['only']) is not supported yet"),
    ]:
        state = await harness.run({"prompt": "x", **row})
        assert state["stop_condition"] == "has_error" and message in state["error"]["message"], row
    assert (await harness.run({"prompt": "x", "tools": {"hide": []}}))["error"] is None


async def test_a_borrowed_tool_stays_with_the_child_that_borrowed_it(mock: MockModelServer, make_harness: Any) -> None:
    child_harness = make_harness()

    async def parent_program(task: vf.Task, state: vf.State) -> None:
        child = state.for_task(vf.Task({"prompt": "child"}), borrow=["model"], tools=["calculate"])
        state["child_tools"] = [tool["name"] for tool in (await child_harness.run(child.task, child))["tool_defs"]]

    mock.script(Reply.text("child done"), Reply.text("plain done"))
    parent = await make_harness(program=parent_program, toolsets=[calculator(make_ledger_type())]).run({"prompt": "p"})
    assert parent["child_tools"] == ["calculate"]
    after = await child_harness.run({"prompt": "plain"})  # the same tool-less harness, no parent: nothing borrowed
    assert after["tool_defs"] == [] and not mock.requests[-1].tools
