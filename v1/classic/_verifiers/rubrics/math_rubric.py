"""``verifiers.rubrics.math_rubric``."""

from v1 import MathRubric

__all__ = ["MathRubric"]
