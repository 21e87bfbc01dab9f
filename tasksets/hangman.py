"""hangman: find a word one letter at a time; a simulated user keeps the game.

Each turn the model guesses a letter (or the whole word) as ``<guess>x</guess>``; the user
shows the word with the found letters (``_ a _ _ a``) and the wrong guesses left. Six
wrong guesses lose (stop condition `hanged`); finding every letter wins (`solved`). The
reward is 1.0 for a win and otherwise half the share of the word's distinct letters found.
"""

from __future__ import annotations

import re
from typing import Any

import v1 as vf

SECRETS = ["banana", "lantern", "pyramid", "whisper", "giraffe", "quartz", "blanket", "orchard"]
MAX_WRONG = 6
PARSER = vf.XMLParser(["guess"], answer_field="guess")
SYSTEM_PROMPT = (
    "You are playing hangman. Find the secret English word. Each turn guess one letter, or the whole word, "
    "as <guess>x</guess>. Six wrong guesses and you lose."
)


def load_rows() -> list[dict[str, Any]]:
    """One game per secret word (`info.secret`); the prompt shows its length."""
    return [
        {"question": f"The word has {len(secret)} letters: {' '.join('_' * len(secret))}. Guess.", "info": {"secret": secret}}
        for secret in SECRETS
    ]


def read_guess(text: str | None) -> str | None:
    guess = (PARSER.parse_answer(text or "") or "").strip().lower()
    return guess if re.fullmatch(r"[a-z]+", guess) else None


def play(completion: list[dict[str, Any]], secret: str) -> tuple[set[str], int, bool]:
    """Replay the model's guesses: (letters found, wrong guesses, solved)."""
    found: set[str] = set()
    wrong = 0
    for message in completion:
        if message.get("role") != "assistant" or wrong >= MAX_WRONG:
            continue
        guess = read_guess(message.get("content"))
        if guess == secret:
            return set(secret), wrong, True
        if guess is not None and len(guess) == 1 and guess in secret:
            found.add(guess)
        else:
            wrong += 1
        if found >= set(secret):
            return found, wrong, True
    return found, wrong, False


def referee(messages: list[dict[str, Any]], secret: str, state: vf.State) -> str | None:
    """The user: the word as found so far and the wrong guesses left; ends a won or lost game."""
    found, wrong, solved = play(messages, secret)
    if solved:
        state.stop("solved")
        return None
    if wrong >= MAX_WRONG:
        state.stop("hanged")
        return None
    shown = " ".join(letter if letter in found else "_" for letter in secret)
    return f"{shown}\nWrong guesses left: {MAX_WRONG - wrong}."


def hangman_reward(completion: list[dict[str, Any]], info: dict[str, Any]) -> float:
    """1.0 for a win; else half the share of the word's distinct letters found."""
    secret = info["secret"]
    found, _, solved = play(completion, secret)
    return 1.0 if solved else 0.5 * len(found) / len(set(secret))


DEFAULTS: dict[str, Any] = {
    "taskset_id": "hangman",
    "source": "tasksets.hangman:load_rows",
    "eval_source": "tasksets.hangman:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "user": {"fn": "tasksets.hangman:referee", "bindings": {"secret": "task.info.secret"}},
    "rewards": [{"fn": "tasksets.hangman:hangman_reward", "weight": 1.0}],
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The hangman taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "MAX_WRONG", "SECRETS", "hangman_reward", "load_rows", "load_taskset", "play", "read_guess", "referee"]
