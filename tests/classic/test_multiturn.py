"""`MultiTurnEnv`, `ToolEnv` and `StatefulToolEnv` over real HTTP against the mock: turns, hooks,
built-in and decorated stop conditions, cleanups, tools, and bad input recorded on the rollout."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from classic_reverse import TwiceEnv, back_to_question, responder, reverse_text, rows

import v1 as vf
from tests.tools.patience import growing_limits
from v1.testing import MockModelServer, Reply


@pytest.fixture
def mock() -> Any:
    with MockModelServer(responder) as server:
        yield server


@pytest.fixture
def client(mock: MockModelServer) -> vf.ClientConfig:
    return vf.ClientConfig(api_base_url=mock.url, max_retries=0)


ROW = {"question": "abc", "answer": "cba", "example_id": 0}


async def test_two_turns_env_response_and_final_env_response(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = TwiceEnv(dataset=rows(), rubric=vf.Rubric([back_to_question]), max_turns=5)
    state = await env.rollout(ROW, client, "m")
    assert [m["content"] for m in state["completion"]] == ["cba", "cba", "abc", "done"]
    assert state["stop_condition"] == "has_final_env_response" and state["reward"] == 1.0
    assert len(state["trajectory"]) == 2
    assert mock.requests[1].body["messages"][-2:] == [
        {"role": "assistant", "content": "cba"},
        {"role": "user", "content": "cba"},
    ]


class Hooked(TwiceEnv):
    cleaned: ClassVar[list[str]] = []

    async def setup_state(self, state: vf.State) -> vf.State:
        state["turn_notes"] = []
        return state

    async def add_trajectory_step(self, state: vf.State, step: Any) -> None:
        step["extras"]["turn"] = len(state["trajectory"])
        state["turn_notes"].append(step["completion"][-1]["content"])

    @vf.stop
    async def said_abc(self, state: vf.State) -> bool:
        return any(note == "abc" for note in state["turn_notes"])

    @vf.cleanup
    async def note_cleanup(self, state: vf.State) -> None:
        self.cleaned.append(state["trajectory_id"])


async def test_hooks_decorated_stop_and_cleanup_methods(client: vf.ClientConfig) -> None:
    env = Hooked(dataset=rows(), rubric=vf.Rubric([back_to_question]))
    state = await env.rollout(ROW, client, "m")
    assert state["stop_condition"] == "said_abc" and state["turn_notes"] == ["cba", "abc"]
    assert [step["extras"]["turn"] for step in state["trajectory"]] == [1, 2]
    assert Hooked.cleaned == [state["trajectory_id"]]


@pytest.mark.parametrize(
    ("settings", "condition", "steps"),
    [
        ({"max_turns": 1}, "max_turns_reached", 1),
        ({"max_seq_len": 4}, "prompt_too_long", 2),  # the second turn reaches it (recorded truncated)
        ({"max_total_completion_tokens": 1}, "max_total_completion_tokens_reached", 1),
    ],
)
async def test_built_in_stop_conditions(client: vf.ClientConfig, settings: dict[str, Any], condition: str, steps: int) -> None:
    env = TwiceEnv(dataset=rows(), max_turns=settings.pop("max_turns", -1), max_seq_len=settings.pop("max_seq_len", None))
    if settings:
        env.set_max_total_completion_tokens(settings["max_total_completion_tokens"])
    state = await env.rollout(ROW, client, "m")
    assert state["stop_condition"] == condition and len(state["trajectory"]) == steps and state["error"] is None


async def test_timeout_reached(mock: MockModelServer, client: vf.ClientConfig) -> None:
    # Only the second reply hangs past the rollout's timeout; the first must come within it, so a loaded
    # machine tries a longer timeout.
    for limit in growing_limits(3):
        mock.reset()
        mock.script(Reply.text("cba"), Reply.hang())
        env = TwiceEnv(dataset=rows(), timeout_seconds=limit)
        state = await env.rollout(ROW, client, "m")
        if state["trajectory"]:
            break
    assert state["stop_condition"] == "timeout_reached" and len(state["trajectory"]) == 1


@pytest.mark.parametrize("reply", [42, [{"content": "no role"}], None])
async def test_env_response_returning_a_non_message_is_a_recorded_error(client: vf.ClientConfig, reply: Any) -> None:
    class Broken(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:
            return reply

    env = Broken(dataset=rows(), max_turns=3)
    out = await env.generate([ROW, {**ROW, "example_id": 1}], client, "m")
    for output in out["outputs"]:
        assert output["error"]["type"] == "ProgramError" and "expected a list of messages" in output["error"]["message"]
        assert output["stop_condition"] == "has_error" and len(output["trajectory"]) == 1


def test_bad_settings() -> None:
    with pytest.raises(vf.ConfigError, match="max_turns"):
        TwiceEnv(dataset=rows(), max_turns=0)
    with pytest.raises(vf.ConfigError, match="timeout_seconds"):
        TwiceEnv(dataset=rows(), timeout_seconds=-1)
    with pytest.raises(vf.ConfigError, match="positive integer"):
        TwiceEnv(dataset=rows()).set_max_total_completion_tokens(0)
    with pytest.raises(TypeError, match="abstract"):
        vf.MultiTurnEnv(dataset=rows())  # type: ignore[abstract]


# -- tools -----------------------------------------------------------------------------------


async def test_tool_env_calls_the_tool_and_stops_when_no_tool_is_called(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = vf.ToolEnv(tools=[reverse_text], dataset=rows(), rubric=vf.ToolRubric(tools=[reverse_text]))
    out = await env.generate([ROW], client, "m")
    (output,) = out["outputs"]
    assert [m["role"] for m in output["completion"]] == ["assistant", "tool", "assistant"]
    assert output["completion"][1]["content"] == "cba" and output["completion"][2]["content"] == "cba"
    assert output["stop_condition"] == "no_tools_called"
    assert output["metrics"] == {"total_tool_calls": 1.0, "reverse_text_calls": 1.0}
    (offered,) = mock.requests[0].body["tools"]
    assert offered["function"]["name"] == "reverse_text"
    assert offered["function"]["parameters"]["properties"]["text"]["description"] == "the text to reverse."
    assert out["metadata"]["tools"][0]["name"] == "reverse_text" and output["tool_defs"][0]["name"] == "reverse_text"


async def test_tool_errors_become_messages_and_stop_errors_end_the_rollout(
    mock: MockModelServer, client: vf.ClientConfig
) -> None:
    def flaky(text: str) -> str:
        """Fail."""
        raise ValueError(f"cannot handle {text}")

    def fatal(text: str) -> str:
        """Fail badly."""
        raise KeyError("gone")

    env = vf.ToolEnv(tools=[flaky, fatal], dataset=rows(), error_formatter=lambda e: f"oops: {e}", stop_errors=[KeyError])
    mock.script(Reply.tool("flaky", {"text": "abc"}), Reply.text("fine"))
    state = await env.rollout(ROW, client, "m")
    assert state["completion"][1]["content"] == "oops: cannot handle abc" and state["error"] is None
    mock.script(Reply.tool("nope", {}), Reply.tool("flaky", "{bad json"), Reply.tool("flaky", {"text": 3}), Reply.text("ok"))
    state = await env.rollout(ROW, client, "m")
    tool_texts = [m["content"] for m in state["completion"] if m["role"] == "tool"]
    assert "unknown tool 'nope'" in tool_texts[0] and "not valid JSON" in tool_texts[1] and "invalid arguments" in tool_texts[2]
    mock.script(Reply.tool("fatal", {"text": "abc"}), Reply.text("never"))
    state = await env.rollout(ROW, client, "m")
    assert isinstance(state["error"], vf.ToolError) and state["error"].record["type"] == "KeyError"  # the seed's vf.Error
    assert state["error"].record["where"] == "tool"
    assert state["stop_condition"] == "has_error" and len(state["trajectory"]) == 1


async def test_add_and_remove_tools(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = vf.ToolEnv(dataset=rows())
    env.add_tool(reverse_text)
    assert env.toolset in env.harness.toolsets and list(env.toolset.functions) == ["reverse_text"]  # the core dispatches
    with pytest.raises(vf.ConfigError, match="already exists"):
        env.add_tool(reverse_text)
    await env.rollout(ROW, client, "m")
    assert [t["function"]["name"] for t in mock.requests[0].body["tools"]] == ["reverse_text"]
    env.remove_tool(reverse_text)
    with pytest.raises(vf.ConfigError, match="no tool named"):
        env.remove_tool("reverse_text")
    assert env.toolset in env.harness.toolsets and not env.toolset.functions
    mock.reset()
    state = await env.rollout(ROW, client, "m")
    assert "tools" not in mock.requests[0].body and state["completion"] == [{"role": "assistant", "content": "cba"}]


class Notes(vf.StatefulToolEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_tool(self.write_note, args_to_skip=["notebook"])

    @staticmethod
    def write_note(text: str, notebook: list[str]) -> str:
        """Write a note.

        Args:
            text: what to write.
            notebook: the rollout's notebook (from the state).
        """
        notebook.append(text)
        return f"{len(notebook)} notes"

    async def setup_state(self, state: vf.State) -> vf.State:
        state = await super().setup_state(state)
        state["notebook"] = []
        return state

    def update_tool_args(
        self, tool_name: str, tool_args: dict[str, Any], messages: Any, state: vf.State, **kwargs: Any
    ) -> dict[str, Any]:
        return {**tool_args, "notebook": state["notebook"]}


async def test_stateful_tool_env_hides_and_injects_arguments(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = Notes(dataset=rows())
    mock.script(Reply.tool("write_note", {"text": "a"}).and_tool("write_note", {"text": "b"}), Reply.text("done"))
    state = await env.rollout(ROW, client, "m")
    (offered,) = mock.requests[0].body["tools"]
    assert set(offered["function"]["parameters"]["properties"]) == {"text"}
    assert state["notebook"] == ["a", "b"]
    assert [m["content"] for m in state["completion"] if m["role"] == "tool"] == ["1 notes", "2 notes"]
    mock.script(Reply.tool("write_note", {"text": "x", "notebook": ["forged"]}), Reply.text("done"))
    state = await env.rollout(ROW, client, "m")
    assert state["notebook"] == ["x"]  # the state's value wins over a model-sent hidden argument


class DefaultNotes(Notes):
    """`StatefulToolEnv`'s own `update_tool_args`: the hidden argument is the state field of its name."""

    update_tool_args = vf.StatefulToolEnv.update_tool_args


async def test_a_model_sent_hidden_argument_never_reaches_the_tool(mock: MockModelServer, client: vf.ClientConfig) -> None:
    env = DefaultNotes(dataset=rows())
    mock.script(Reply.tool("write_note", {"text": "x", "notebook": ["another rollout's"]}), Reply.text("done"))
    state = await env.rollout(ROW, client, "m")
    assert state["notebook"] == ["x"]
    assert [m["content"] for m in state["completion"] if m["role"] == "tool"] == ["1 notes"]


async def test_completion_message_type_over_several_turns(mock: MockModelServer, client: vf.ClientConfig) -> None:
    class TextTwice(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: vf.State, **kwargs: Any) -> Any:
            assert isinstance(messages, str)  # the whole text so far
            if len(state["trajectory"]) >= 2:
                state["final_env_response"] = [{"role": "user", "content": "bye"}]
            return " again: "

    env = TextTwice(dataset=[{"prompt": "abc", "answer": ""}], message_type="completion", max_turns=5)
    state = await env.rollout({"prompt": "abc", "example_id": 0}, client, "m")
    assert state["prompt"] == "abc" and state["stop_condition"] == "has_final_env_response"
    assert len(state["trajectory"]) == 2 and mock.requests[1].last_user_text == "abccba again: "
    assert state["completion"] == "cba again: " + "abccba again: "[::-1]
