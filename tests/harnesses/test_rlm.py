"""The recursive-LM harness against the mock: the root asks a child through `llm_query`, the child uses a borrowed
tool and asks a grandchild, the grandchild (at max_depth) cannot recurse; each level's trajectory is its own, linked
to its parent, and the cost of the sub-calls is summed on the root."""

from __future__ import annotations

import pytest

import v1 as vf
from harnesses.rlm import RLMHarness
from v1.testing import MockModelServer, MockRequest, Reply


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def tool_names(request: MockRequest) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.tools or [])


def scripted(request: MockRequest) -> Reply:
    asked = request.messages[0]["content"]
    answered = request.messages[-1]["role"] == "tool"
    if asked.startswith("root"):
        return (
            Reply.text("root: " + request.messages[-1]["content"]) if answered else Reply.tool("llm_query", {"prompt": "child"})
        )
    if asked == "child":
        if answered:
            return Reply.text(" and ".join(m["content"] for m in request.messages if m["role"] == "tool"))
        return Reply.tool("add", {"a": 2, "b": 3}).and_tool("llm_query", {"prompt": "grandchild"})
    return Reply.text("hi from below")


async def test_sub_calls_recurse_to_the_depth_limit_with_their_own_trajectories() -> None:
    with MockModelServer() as mock:
        mock.responder = scripted
        harness = RLMHarness(
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="mock-model",
            toolsets=[vf.Toolset([add])],
            config={"max_depth": 2},
        )
        state = await harness.run("root question")
        requests = {request.messages[0]["content"]: tool_names(request) for request in mock.requests}
    assert state["error"] is None, state["error"]
    assert state["completion"][-1]["content"] == "root: 5 and hi from below"
    assert requests == {"root question": ["add", "llm_query"], "child": ["add", "llm_query"], "grandchild": ["add"]}
    assert len(state["trajectory"]) == 2  # the root's own calls only
    (child,) = state["rlm_calls"]
    assert (child["parent_id"], child["depth"], child["prompt"]) == (state["trajectory_id"], 1, "child")
    assert [step["trajectory_id"] for step in child["trajectory"]] == [child["trajectory_id"]] * 2
    (grandchild,) = child["rlm_calls"]
    assert (grandchild["parent_id"], grandchild["depth"], grandchild["answer"]) == (child["trajectory_id"], 2, "hi from below")
    assert len(grandchild["trajectory"]) == 1 and grandchild["rlm_calls"] == []
    below = [*child["trajectory"], *grandchild["trajectory"]]
    assert state["rlm_usage"] == {
        "calls": 2.0,
        "input_tokens": float(sum(step["response"]["usage"]["prompt_tokens"] for step in below)),
        "output_tokens": float(sum(step["response"]["usage"]["completion_tokens"] for step in below)),
    }
    assert state["metrics"]["rlm_calls"] == 2.0
    assert len(mock.requests) == 5


async def test_the_call_budget_and_a_depth_of_zero() -> None:
    with MockModelServer() as mock:
        mock.script(
            Reply.tool("llm_query", {"prompt": "one"}).and_tool("llm_query", {"prompt": "two"}),
            Reply.text("sub answer"),
            Reply.text("final"),
        )
        harness = RLMHarness(client=vf.ClientConfig(api_base_url=mock.url, max_retries=0), model="m", config={"max_calls": 1})
        state = await harness.run("q")
        results = sorted(m["content"] for m in state["trajectory"][-1]["prompt"] if m["role"] == "tool")
    assert results[0].startswith("Error: this rollout used all of its 1 llm_query calls")
    assert results[1] == "sub answer"
    assert state["rlm_usage"]["calls"] == 1.0
    assert RLMHarness(model="m", config={"max_depth": 0}).toolsets == []
    with pytest.raises(vf.ConfigError, match="max_depth"):
        RLMHarness(config={"max_depth": -1})
