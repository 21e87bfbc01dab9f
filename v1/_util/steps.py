"""What counts as a trajectory step, and taking out what a program put there that is not one.

The endpoint records each model call as a step: a dict whose `prompt` and `completion` are
messages (a list of chat messages, or a string in the completions format). A program holds the
same list and may append to it; whatever it appends is met later by code that takes every entry
for a step (the completion's rendering, group scoring, token counts, a trainer's batch). The
harness checks that list where the program (and its update handlers, and its cleanups) hand it
back, against that one shape, so no reader has to guess at the forms a program could invent.
"""

from __future__ import annotations

from typing import Any

_FOREIGN_SHOWN = 80
"""How much of a foreign entry's repr the error quotes."""


def is_step(entry: Any) -> bool:
    """Whether `entry` has a step's shape: a dict whose `prompt` and `completion` are messages."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("prompt"), (list, str))
        and isinstance(entry.get("completion"), (list, str))
    )


def take_out_foreign_entries(trajectory: list[Any]) -> TypeError | None:
    """Remove the entries of `trajectory` that are not steps; the error that names them, or None when all are."""
    if all(map(is_step, trajectory)):
        return None
    foreign = [(index, entry) for index, entry in enumerate(trajectory) if not is_step(entry)]
    trajectory[:] = [entry for entry in trajectory if is_step(entry)]
    index, first = foreign[0]
    shown = repr(first)
    if len(shown) > _FOREIGN_SHOWN:
        shown = shown[:_FOREIGN_SHOWN] + "..."
    one = len(foreign) == 1
    return TypeError(
        f"{len(foreign)} trajectory entr{'y is' if one else 'ies are'} not a step and {'was' if one else 'were'} "
        f"taken out (first: trajectory[{index}], {shown}); a step is a dict whose 'prompt' and 'completion' are "
        "messages: let the endpoint record model calls"
    )


__all__ = ["is_step", "take_out_foreign_entries"]
