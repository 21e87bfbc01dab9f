"""``verifiers.rubrics.judge_rubric``."""

from v1 import JudgeRubric

__all__ = ["JudgeRubric"]
