"""``verifiers.rubrics``: the Rubric family."""

from v1 import JudgeRubric, MathRubric, Rubric, RubricGroup, ToolRubric

__all__ = ["JudgeRubric", "MathRubric", "Rubric", "RubricGroup", "ToolRubric"]
