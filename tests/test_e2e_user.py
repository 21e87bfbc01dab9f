"""End to end: user simulators answering between model turns of the base loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply


def binary_searcher(request: MockRequest) -> Reply:
    """A 'model' that guesses a number between 1 and 100 from the user's hints."""
    low, high, last = 1, 100, None
    for message in request.messages:
        if message["role"] == "assistant":
            last = int(message["content"])
        elif message["role"] == "user" and last is not None:
            if message["content"] == "higher":
                low = last + 1
            elif message["content"] == "lower":
                high = last - 1
    return Reply.text(str((low + high) // 2))


def referee(messages: list[dict[str, Any]], secret: int, state: vf.State) -> str | None:
    """The user: says higher or lower, and ends the game on a right guess."""
    guess = int(messages[-1]["content"])
    state["guesses"] = state.get("guesses", 0) + 1
    if guess == secret:
        state.stop("guessed")
        return None
    return "higher" if guess < secret else "lower"


@vf.reward
def won(state: vf.State) -> float:
    return float(state["stop_condition"] == "guessed")


def guessing_taskset() -> vf.Taskset:
    rows = [{"prompt": "Guess my number (1-100).", "info": {"secret": secret}} for secret in (1, 37, 64, 100)]
    return vf.Taskset(source=rows, user=vf.User(referee, bindings={"secret": "task.info.secret"}), rewards=[won])


async def test_number_guessing_game_is_played_to_the_end(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = binary_searcher
    taskset = guessing_taskset()
    harness = make_harness(taskset=taskset)
    states = await asyncio.gather(*(harness.run(task) for task in taskset.tasks()))
    for task, state in zip(taskset.tasks(), states):
        assert state["error"] is None
        assert state["stop_condition"] == "guessed" and state["reward"] == 1.0
        assert state["completion"][-1] == {"role": "assistant", "content": str(task["info"]["secret"])}
        assert len(state["trajectory"]) == state["guesses"] <= 7
        roles = [m["role"] for m in state["completion"]]
        assert roles == ["assistant", "user"] * (state["guesses"] - 1) + ["assistant"]


async def test_the_turn_limit_still_applies_with_a_user(mock: MockModelServer, make_harness: Any) -> None:
    mock.responder = Reply.text("50")
    state = await make_harness(taskset=guessing_taskset(), max_turns=3).run({"prompt": "guess", "info": {"secret": 7}})
    assert state["stop_condition"] == "max_turns_reached" and len(state["trajectory"]) == 3


async def test_a_users_own_model_calls_are_not_policy_steps(mock: MockModelServer, make_harness: Any) -> None:
    def responder(request: MockRequest) -> Reply:
        if request.last_user_text.startswith("USER-SIM"):
            return Reply.text(f"user reply {len(request.messages)}")
        return Reply.text("policy answer")

    async def simulated(messages: list[dict[str, Any]], client: Any, model: str, state: vf.State) -> str | None:
        if sum(m["role"] == "user" for m in messages) >= 3:
            state.stop("conversation_over")
            return None
        reply = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"USER-SIM: reply to {messages[-1]['content']}"}]
        )
        return reply.choices[0].message.content

    mock.responder = responder
    harness = make_harness(user=vf.User(simulated, model="user-model"))
    state = await harness.run("hello")
    assert state["stop_condition"] == "conversation_over" and state["error"] is None
    assert len(state["trajectory"]) == 3  # the policy's calls only
    assert all("USER-SIM" not in str(step["prompt"]) for step in state["trajectory"])
    assert [m["content"] for m in state["completion"]] == ["policy answer", "user reply 1"] * 2 + ["policy answer"]
    user_requests = [r for r in mock.requests if r.last_user_text.startswith("USER-SIM")]
    assert len(user_requests) == 2 and {r.body["model"] for r in user_requests} == {"user-model"}
    assert {r.body["model"] for r in mock.requests if r not in user_requests} == {"test-model"}


async def test_a_failing_user_is_recorded_and_other_rollouts_finish(mock: MockModelServer, make_harness: Any) -> None:
    def moody(messages: list[dict[str, Any]], task: vf.Task) -> str:
        if task["info"]["moody"]:
            raise ValueError("I refuse to answer")
        return ""

    harness = make_harness(user=moody)
    bad, good = await harness.run_group(
        [vf.Task({"prompt": "a", "info": {"moody": True}}), vf.Task({"prompt": "b", "info": {"moody": False}})]
    )
    assert bad["error"] == {"type": "ValueError", "message": "I refuse to answer", "where": "user"}
    assert bad["stop_condition"] == "has_error"
    assert good["error"] is None and good["stop_condition"] == "user_done"


async def test_user_objects_are_per_rollout_and_closed(mock: MockModelServer, make_harness: Any) -> None:
    opened: list[list[str]] = []

    class Notebook(list):
        def close(self) -> None:
            opened.remove(self)

    def make_notebook() -> Notebook:
        notebook = Notebook()
        opened.append(notebook)
        return notebook

    def scribe(messages: list[dict[str, Any]], notebook: Notebook) -> str | None:
        notebook.append(messages[-1]["content"])
        return None if len(notebook) >= 2 else "go on"

    harness = make_harness(user=vf.User(scribe, bindings={"notebook": "objects.notebook"}, objects={"notebook": make_notebook}))
    states = await asyncio.gather(*(harness.run("hi") for _ in range(3)))
    assert all(s["stop_condition"] == "user_done" and len(s["trajectory"]) == 2 for s in states)
    assert opened == []


def test_user_from_config_and_collisions(make_harness: Any) -> None:
    taskset = vf.Taskset(config={"user": {"fn": f"{__name__}:referee", "bindings": {"secret": "task.info.secret"}}})
    assert isinstance(taskset.user, vf.User) and taskset.user.fn is referee
    assert vf.TasksetConfig(user=f"{__name__}:referee").user == vf.UserConfig(fn=f"{__name__}:referee")
    with pytest.raises(vf.ConfigError, match="both the taskset and the harness have a user simulator"):
        make_harness(taskset=taskset, user=lambda messages: None)
    with pytest.raises(vf.ConfigError, match="binding 'nope': the user function takes no argument 'nope'"):
        vf.User(referee, bindings={"nope": "task.x"})
    with pytest.raises(vf.ConfigError, match="user function argument 'secret' can't be injected"):
        vf.User(referee)
    with pytest.raises(vf.ConfigError, match=r"binding 'secret': 'objects\.missing' does not resolve"):
        vf.User(referee, bindings={"secret": "objects.missing"})
