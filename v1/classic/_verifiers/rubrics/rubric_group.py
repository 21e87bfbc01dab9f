"""``verifiers.rubrics.rubric_group``."""

from v1 import RubricGroup

__all__ = ["RubricGroup"]
