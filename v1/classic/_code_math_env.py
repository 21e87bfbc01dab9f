"""`CodeMathEnv`: seed 003's name for math with interactive Python code execution."""

from __future__ import annotations

from typing import Any

from v1.classic._rubric import MathRubric
from v1.classic._sandbox_env import PythonEnv


class CodeMathEnv(PythonEnv):
    """A `PythonEnv` (a persistent Python REPL tool per rollout) scored by `MathRubric` unless given a rubric.

    Args:
        **kwargs: the `PythonEnv` arguments.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("rubric", MathRubric())
        super().__init__(**kwargs)


__all__ = ["CodeMathEnv"]
