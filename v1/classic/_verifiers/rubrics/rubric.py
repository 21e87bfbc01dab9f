"""``verifiers.rubrics.rubric``."""

from v1 import Rubric

__all__ = ["Rubric"]
