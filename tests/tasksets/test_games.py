"""wordle, hangman and alphabet_sort: simulated users keep the game; rewards give partial credit."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import v1 as vf
from tasksets import alphabet_sort, hangman, wordle
from v1.testing import MockModelServer, MockRequest, Reply


def said(*texts: str) -> list[dict[str, str]]:
    completion = []
    for text in texts:
        completion += [{"role": "assistant", "content": text}, {"role": "user", "content": "feedback"}]
    return completion[:-1]


def wordle_solver(request: MockRequest) -> Reply:
    """Guesses the first bundled word consistent with all the feedback so far."""
    history = []
    for message, reply in zip(request.messages, request.messages[1:]):
        if message["role"] == "assistant" and reply["role"] == "user" and "\n" in reply["content"]:
            history.append((wordle.read_guess(message["content"]), reply["content"].split("\n")[1]))
    for candidate in wordle.SECRETS:
        if all(wordle.feedback(guess, candidate) == marks for guess, marks in history if guess):
            return Reply.text(f"<guess>{candidate}</guess>")
    return Reply.text("<guess>zzzzz</guess>")


def test_wordle_feedback_and_reward() -> None:
    assert wordle.feedback("speed", "abide") == "--Y-Y"
    assert wordle.feedback("eerie", "sheep") == "YY---"
    info = {"secret": "crane"}
    assert wordle.wordle_reward(said("<guess>plumb</guess>", "<guess>crane</guess>"), info) == 1.0
    assert wordle.wordle_reward(said("<guess>crate</guess>"), info) == 0.5 * 8 / 10  # four greens
    assert wordle.wordle_reward(said("<guess>plumb</guess>"), info) == 0.0
    assert wordle.wordle_reward(said("crane"), info) == 0.0  # no <guess> tags: not a guess


async def test_wordle_is_played_to_a_solve(mock: MockModelServer) -> None:
    mock.responder = wordle_solver
    env = vf.load_environment("wordle", harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m"})
    states = await asyncio.gather(*(env.harness.run(task) for task in env.taskset.tasks()[:4]))
    for state in states:
        assert state["error"] is None and state["stop_condition"] == "solved" and state["reward"] == 1.0
        assert 1 <= state["metrics"]["guesses_used"] <= wordle.MAX_GUESSES


def test_hangman_reward() -> None:
    info = {"secret": "banana"}
    assert hangman.hangman_reward(said(*(f"<guess>{c}</guess>" for c in "anb")), info) == 1.0
    assert hangman.hangman_reward(said("<guess>banana</guess>"), info) == 1.0
    assert hangman.hangman_reward(said("<guess>a</guess>", "<guess>z</guess>"), info) == 0.5 / 3
    assert hangman.hangman_reward(said(*(f"<guess>{c}</guess>" for c in "qwxyzv")) + said("<guess>banana</guess>"), info) == 0.0


def letter_guesser(request: MockRequest) -> Reply:
    guessed = {hangman.read_guess(m["content"]) for m in request.messages if m["role"] == "assistant"}
    return Reply.text(f"<guess>{next(c for c in 'eaitrnolsubgdhpwfzqkmcjvxy' if c not in guessed)}</guess>")


async def test_hangman_game_ends_won_or_hanged(mock: MockModelServer) -> None:
    mock.responder = letter_guesser
    env = vf.load_environment(
        "hangman", harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m", "max_turns": 30}
    )
    states = await asyncio.gather(*(env.harness.run(task) for task in env.taskset.tasks()))
    assert {state["stop_condition"] for state in states} <= {"solved", "hanged"}
    for state in states:
        assert state["error"] is None
        assert (state["reward"] == 1.0) == (state["stop_condition"] == "solved")


def sorter(slip: bool) -> Any:
    def reply(request: MockRequest) -> Reply:
        names = [
            n for m in request.messages if m["role"] == "user" for n in re.findall(r"[A-Z][a-z]+", m["content"].split(":")[-1])
        ]
        ordered = sorted(names)
        if slip and len(request.messages) > 3:
            ordered = ordered[::-1]
        return Reply.text("\n".join(ordered))

    return reply


async def test_alphabet_sort_user_adds_names_and_reward_separates(mock: MockModelServer) -> None:
    env = vf.load_environment("alphabet_sort", harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m"})
    task = env.taskset.tasks()[0]  # three batches
    mock.responder = sorter(slip=False)
    good = await env.harness.run(task)
    assert good["error"] is None and good["reward"] == 1.0
    assert [m["role"] for m in good["completion"]] == ["assistant", "user", "assistant", "user", "assistant"]
    assert good["completion"][-1]["content"].split("\n") == alphabet_sort.expected_lists(task["info"]["turns"])[-1]
    mock.responder = sorter(slip=True)
    slipped = await env.harness.run(task)
    assert 0.3 < slipped["reward"] < 1.0
    assert alphabet_sort.sorted_lists([], task["info"]) == 0.0
