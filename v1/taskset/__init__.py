"""The `Taskset`: task rows (a list, or a stream drawn on demand), the toolsets and scoring they come with, and the simulated `User`."""

from v1.taskset._gold import answer_gold
from v1.taskset._rows import RowSource, content_key
from v1.taskset._taskset import Taskset, rows_to_dataset
from v1.taskset._user import User, UserLike, resolve_user

__all__ = ["RowSource", "Taskset", "User", "UserLike", "answer_gold", "content_key", "resolve_user", "rows_to_dataset"]
