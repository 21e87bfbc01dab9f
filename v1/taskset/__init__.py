"""The `Taskset`: task rows, the toolsets and scoring they come with, and the simulated `User`."""

from v1.taskset._gold import answer_gold
from v1.taskset._taskset import Taskset, rows_to_dataset
from v1.taskset._user import User, UserLike, resolve_user

__all__ = ["Taskset", "answer_gold", "User", "UserLike", "resolve_user", "rows_to_dataset"]
