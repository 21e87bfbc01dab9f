"""alphabet_sort: keep a list of names sorted while a simulated user adds more, turn after turn.

Each row's `info.turns` lists batches of names. The first batch is the prompt; after each
answer the user simulator adds the next batch, until none is left. Every answer must be
the whole list so far, sorted, one name per line. The reward is the mean, over the
user's turns, of how close each answer is to the right list (a similarity ratio of the
lines), so a model that slips on a later turn keeps partial credit.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import v1 as vf

DATA = Path(__file__).parent / "data" / "alphabet_sort.jsonl"
SYSTEM_PROMPT = "Sort the names alphabetically. Answer with the sorted names only, one per line."


def _ask(names: list[str], first: bool) -> str:
    listed = ", ".join(names)
    if first:
        return f"Sort these names alphabetically: {listed}"
    return f"Add these names and give the whole list, sorted: {listed}"


def load_rows() -> list[dict[str, Any]]:
    """Rows with the first request as `question` and every batch in `info.turns`."""
    with DATA.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [{"question": _ask(row["turns"][0], True), "info": {"turns": row["turns"]}} for row in rows]


def add_names(messages: list[dict[str, Any]], turns: list[list[str]]) -> str | None:
    """The user: the next batch of names after each answer; nothing (the rollout ends) after the last."""
    answered = sum(1 for message in messages if message.get("role") == "assistant")
    if answered >= len(turns):
        return None
    return _ask(list(turns[answered]), False)


def expected_lists(turns: list[list[str]]) -> list[list[str]]:
    """The right answer after each turn: every name so far, sorted."""
    seen: list[str] = []
    answers = []
    for batch in turns:
        seen += list(batch)
        answers.append(sorted(seen, key=str.casefold))
    return answers


def _lines(text: str | None) -> list[str]:
    return [line.strip().lstrip("-*0123456789.) ").strip() for line in (text or "").splitlines() if line.strip()]


def sorted_lists(completion: list[dict[str, Any]], info: dict[str, Any]) -> float:
    """Mean similarity of each answer to the sorted list expected at its turn (missing answers score 0)."""
    expected = expected_lists(info["turns"])
    answers = [message.get("content") for message in completion if message.get("role") == "assistant"]
    scores = [
        difflib.SequenceMatcher(None, _lines(answer), want).ratio() if answer is not None else 0.0
        for answer, want in zip(answers + [None] * len(expected), expected)
    ]
    return sum(scores) / len(expected)


def gold(task: vf.Task, state: vf.State) -> dict[str, Any]:
    """The gold solution: each turn's sorted list, with the user's requests between them, as the completion."""
    turns = task["info"]["turns"]
    completion: list[dict[str, Any]] = []
    for index, answer in enumerate(expected_lists(turns)):
        if index:
            completion.append({"role": "user", "content": _ask(list(turns[index]), False)})
        completion.append({"role": "assistant", "content": "\n".join(answer)})
    return {"completion": completion}


DEFAULTS: dict[str, Any] = {
    "taskset_id": "alphabet_sort",
    "source": "tasksets.alphabet_sort:load_rows",
    "eval_source": "tasksets.alphabet_sort:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "user": {"fn": "tasksets.alphabet_sort:add_names", "bindings": {"turns": "task.info.turns"}},
    "rewards": [{"fn": "tasksets.alphabet_sort:sorted_lists", "weight": 1.0}],
    "gold": "tasksets.alphabet_sort:gold",
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The alphabet_sort taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SYSTEM_PROMPT", "add_names", "expected_lists", "gold", "load_rows", "load_taskset", "sorted_lists"]
