"""Text from outside (an upstream's error, a program's message, a row's value) made safe to print on a terminal.

An allow list: a printable character (`str.isprintable`: letters, marks, numbers, punctuation,
symbols and the space), a newline or a tab prints as itself; anything else (escape sequences that retitle, clear or
recolour the terminal or write its clipboard, carriage returns that hide a line, bidi overrides
that reorder it) prints as its Python escape (``\\x1b``, ``\\u202e``), so a line shows what it holds.
"""

from __future__ import annotations

KEPT = frozenset("\n\t")


def printable(text: str) -> str:
    """`text` with every character that is neither printable nor a newline or tab replaced by its escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() or char in KEPT else char.encode("unicode_escape").decode("ascii") for char in text)


__all__ = ["printable"]
