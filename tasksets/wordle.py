"""wordle: guess a five-letter word in six tries; a simulated user keeps the game and gives feedback.

After each guess (``<guess>word</guess>``) the user answers with a line per letter
state: ``G`` right letter in the right place, ``Y`` in the word elsewhere, ``-`` not in
the word (repeated letters are counted as in the real game). The game ends when the
word is found (stop condition `solved`) or after six guesses (`out_of_guesses`). The
reward is 1.0 for a solve and otherwise partial credit: half the best guess's share of
greens (2 points) and yellows (1 point).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import v1 as vf

SECRETS = ["crane", "plumb", "ghost", "vivid", "sheep", "flock", "tiger", "mango", "brick", "otter", "jelly", "quiet"]
MAX_GUESSES = 6
PARSER = vf.XMLParser(["guess"], answer_field="guess")
SYSTEM_PROMPT = (
    "You are playing Wordle. Guess the secret five-letter English word in at most six guesses. "
    "After each guess you get one symbol per letter: G = right letter, right place; Y = in the word, "
    "elsewhere; - = not in the word. Think briefly, then answer with your guess as <guess>word</guess>."
)


def load_rows() -> list[dict[str, Any]]:
    """One game per secret word (`info.secret`)."""
    return [{"question": "Make your first guess.", "info": {"secret": secret}} for secret in SECRETS]


def feedback(guess: str, secret: str) -> str:
    """The Wordle marks of `guess` against `secret`: ``G``, ``Y`` or ``-`` per letter."""
    marks = ["-"] * len(guess)
    unmatched = Counter(s for g, s in zip(guess, secret) if g != s)
    for index, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[index] = "G"
        elif unmatched[g] > 0:
            marks[index] = "Y"
            unmatched[g] -= 1
    return "".join(marks)


def read_guess(text: str | None) -> str | None:
    """The five-letter guess in a reply (lower case), or None when there is no valid one."""
    guess = PARSER.parse_answer(text or "")
    guess = (guess or "").strip().lower()
    return guess if re.fullmatch(r"[a-z]{5}", guess) else None


def guesses_of(completion: list[dict[str, Any]]) -> list[str | None]:
    return [read_guess(message.get("content")) for message in completion if message.get("role") == "assistant"]


def referee(messages: list[dict[str, Any]], secret: str, state: vf.State) -> str | None:
    """The user: feedback on the last guess; ends the game when it is solved or out of guesses."""
    guesses = guesses_of(messages)
    guess = guesses[-1] if guesses else None
    if guess == secret:
        state.stop("solved")
        return None
    if len(guesses) >= MAX_GUESSES:
        state.stop("out_of_guesses")
        return None
    left = MAX_GUESSES - len(guesses)
    if guess is None:
        return f"Invalid guess: answer with one five-letter word as <guess>word</guess>. {left} guesses left."
    return f"{guess.upper()}\n{feedback(guess, secret)}\n{left} guesses left."


def wordle_reward(completion: list[dict[str, Any]], info: dict[str, Any]) -> float:
    """1.0 when a guess found the word; else half the best guess's (2 x greens + yellows) / 10."""
    secret = info["secret"]
    guesses = [guess for guess in guesses_of(completion)[:MAX_GUESSES] if guess is not None]
    if secret in guesses:
        return 1.0
    best = max((2 * feedback(g, secret).count("G") + feedback(g, secret).count("Y") for g in guesses), default=0)
    return 0.5 * best / 10


def guesses_used(completion: list[dict[str, Any]]) -> float:
    """How many guesses the model made (a metric)."""
    return float(len(guesses_of(completion)))


DEFAULTS: dict[str, Any] = {
    "taskset_id": "wordle",
    "source": "tasksets.wordle:load_rows",
    "eval_source": "tasksets.wordle:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "user": {"fn": "tasksets.wordle:referee", "bindings": {"secret": "task.info.secret"}},
    "rewards": [{"fn": "tasksets.wordle:wordle_reward", "weight": 1.0}],
    "metrics": [{"fn": "tasksets.wordle:guesses_used"}],
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The wordle taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = [
    "DEFAULTS",
    "MAX_GUESSES",
    "SECRETS",
    "feedback",
    "load_rows",
    "load_taskset",
    "read_guess",
    "referee",
    "wordle_reward",
]
