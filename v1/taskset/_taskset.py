"""`Taskset`: task rows plus the behaviour tasks own (system prompt, tools, rewards, stops)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from v1.config import (
    HandlerLike,
    ProgramConfig,
    ProgramLike,
    RowSourceLike,
    SystemPromptLike,
    TasksetConfig,
    resolve_callable,
)
from v1.errors import ConfigError, TaskError
from v1.rollout import Handler, State, Task, apply_scoring, owned_handlers
from v1.taskset._rows import LoadedRows, RowSource, RowView
from v1.taskset._user import User, UserLike, resolve_user
from v1.tools import Toolset, merge_toolsets

if TYPE_CHECKING:
    from datasets import Dataset


class Taskset:
    """Task rows and the behaviour they own.

    Args:
        source, eval_source: rows as an iterable of mappings, a zero-argument loader,
            a `datasets.Dataset`, or a `module:object` reference to any of them. A
            `question` column becomes a user prompt; rows get an `example_id`. A list,
            tuple or `Dataset` is loaded once and kept (ids are positions); a generator, a
            loader returning an iterator or any other iterable is a stream, drawn on demand
            (ids are `content_key`s), see `iter_rows`, `head`, `shuffle` and `view`.
        infinite: the stream sources never end (`num_examples` / `-n` is then required).
        system_prompt: the default `system_prompt` of every task.
        user: a `User` simulator (or its function, `module:object` reference or `UserConfig`).
        toolsets: toolsets whose tools the tasks may use.
        stops, setups, updates, metrics, rewards, advantages, cleanups: handler lists.
        gold: the gold solution `v1 validate` runs in place of the policy model (see `gold`).
        validate_threshold: the reward a gold run must reach (default: the sum of the rewards' positive weights).
        config: a `TasksetConfig` (or mapping); keyword arguments override it.
    """

    config_type: ClassVar[type[TasksetConfig]] = TasksetConfig

    def __init__(
        self,
        source: RowSourceLike | None = None,
        eval_source: RowSourceLike | None = None,
        *,
        taskset_id: str | None = None,
        system_prompt: SystemPromptLike | None = None,
        infinite: bool | None = None,
        user: UserLike | None = None,
        toolsets: Iterable[Toolset] = (),
        stops: Iterable[HandlerLike] = (),
        setups: Iterable[HandlerLike] = (),
        updates: Iterable[HandlerLike] = (),
        metrics: Iterable[HandlerLike] = (),
        rewards: Iterable[HandlerLike] = (),
        advantages: Iterable[HandlerLike] = (),
        cleanups: Iterable[HandlerLike] = (),
        gold: ProgramLike | str | None = None,
        validate_threshold: float | None = None,
        config: TasksetConfig | Mapping[str, object] | None = None,
    ) -> None:
        overrides = {
            key: value
            for key, value in {
                "source": source,
                "eval_source": eval_source,
                "taskset_id": taskset_id,
                "system_prompt": system_prompt,
                "infinite": infinite,
                "gold": gold,
                "validate_threshold": validate_threshold,
            }.items()
            if value is not None
        }
        self.config = self.config_type.from_config(config, **overrides)
        self.user: User | None = resolve_user(user if user is not None else self.config.user)
        self.toolsets = [Toolset(config=toolset_config) for toolset_config in self.config.toolsets] + list(toolsets)
        merge_toolsets(self.toolsets)
        lists = {"stops": stops, "setups": setups, "updates": updates, "metrics": metrics}
        lists |= {"rewards": rewards, "advantages": advantages, "cleanups": cleanups}
        self._handlers: list[Handler] = apply_scoring(
            owned_handlers(self, self.config, lists, "taskset"), self.config.scoring, "taskset"
        )
        self._sources: dict[Split, RowSource] = {
            "train": LoadedRows(self.config.source, "source", self.config.infinite),
            "eval": LoadedRows(self.config.eval_source, "eval_source", self.config.infinite),
        }

    @property
    def taskset_id(self) -> str:
        return self.config.taskset_id or type(self).__name__

    @property
    def system_prompt(self) -> Any:
        return self.config.system_prompt

    @property
    def handlers(self) -> list[Handler]:
        return list(self._handlers)

    def row_source(self, split: Split = "train") -> RowSource:
        """Where the rows of `split` come from: `draw()` them one at a time, `listed()` when they are a finite list."""
        return self._sources[split]

    @property
    def gold(self) -> ProgramConfig | Callable[..., Any] | None:
        """The gold solution, resolved: what `v1 validate` runs in place of the program and its model.

        A callable `(task, state)` (a `"module:fn"` reference resolves to one) runs in process; a
        program table (a `ProgramConfig` or mapping, e.g. a command applying the task's patch) runs
        as the harness would run it, in the harness's sandbox. None when the taskset declares none.

        Raises:
            ConfigError: a reference that does not resolve, or a value that is not a program.
        """
        value = self.config.gold
        if value is None or isinstance(value, ProgramConfig):
            return value
        if isinstance(value, str):
            return resolve_callable(value, f"{self.taskset_id}: gold")
        if isinstance(value, Mapping):
            return ProgramConfig.from_config(value)
        if callable(value):
            return value
        raise ConfigError(
            f"{self.taskset_id}: gold: expected a program (a callable, a 'module:fn' reference or a program table), "
            f"got {type(value).__name__}"
        )

    def rows(self) -> list[dict[str, Any]]:
        """The training rows as a list (a list source is loaded once; a finite stream is drawn whole).

        Raises:
            ConfigError: the source is infinite (draw with `iter_rows`, or take `head(n)`).
        """
        return self._listed("train")

    def eval_rows(self) -> list[dict[str, Any]]:
        """The evaluation rows as a list, like `rows`; empty when there is no `eval_source`."""
        return self._listed("eval")

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """The training rows, drawn one at a time (nothing of a stream is kept)."""
        return self._sources["train"].draw()

    def iter_eval_rows(self) -> Iterator[dict[str, Any]]:
        """The evaluation rows, drawn one at a time."""
        return self._sources["eval"].draw()

    def _listed(self, split: Split) -> list[dict[str, Any]]:
        source = self._sources[split]
        rows = source.listed()
        if rows is not None:
            return rows
        if source.infinite:
            raise ConfigError(
                f"{self.taskset_id}: {source.field} is infinite, so it has no list of rows; draw them with "
                f"iter_rows() or take head(n)"
            )
        return list(source.draw())

    def head(self, n: int) -> Taskset:
        """This taskset with only the first `n` rows of each source (n >= 1); finite even when the source is not."""
        return self._with_sources(lambda source: source.head(n))

    def shuffle(self, seed: int, buffer: int | None = None) -> Taskset:
        """This taskset with its rows in a seeded random order.

        Args:
            seed: the order's seed (the same seed, the same order).
            buffer: rows held while shuffling; None shuffles all rows at once, which an
                infinite source refuses.
        """
        return self._with_sources(lambda source: source.shuffle(seed, buffer))

    def view(self, transform: RowView) -> Taskset:
        """This taskset with each row passed through `transform` as it is drawn (it returns the row to use;
        setting `example_id` there chooses the row's key)."""
        return self._with_sources(lambda source: source.view(transform))

    def _with_sources(self, wrap: Callable[[RowSource], RowSource]) -> Taskset:
        composed = copy.copy(self)
        composed._sources = {split: wrap(source) for split, source in self._sources.items()}
        return composed

    def task(self, row: Mapping[str, Any]) -> Task:
        """A frozen `Task` from a row; errors name the row and the field."""
        data = dict(row)
        if "prompt" not in data and "question" in data:
            data["prompt"] = [{"role": "user", "content": data["question"]}]
        if self.system_prompt is not None and "system_prompt" not in data:
            data["system_prompt"] = self.system_prompt
        where = f"{self.taskset_id} row {data['example_id']}" if "example_id" in data else f"{self.taskset_id} row"
        return Task(data, where=where).freeze()

    def to_task(self, value: Mapping[str, Any] | Task | str) -> Task:
        """A task from a row, a `Task`, or a bare string (which becomes the user prompt)."""
        if isinstance(value, Task) and value.frozen:
            return value
        if isinstance(value, str):
            return self.task({"prompt": value})
        return self.task(value)

    def tasks(self) -> list[Task]:
        return [self.task(row) for row in self.rows()]

    def eval_tasks(self) -> list[Task]:
        return [self.task(row) for row in self.eval_rows()]

    async def init_group(self, task: Task, num_rollouts: int) -> tuple[list[Task], list[State]]:
        """`num_rollouts` rollouts of one task: the task repeated, and a fresh state each."""
        task = self.to_task(task)
        return [task] * num_rollouts, [State.for_task(task) for _ in range(num_rollouts)]

    def get_dataset(self) -> Dataset:
        """The training rows as a `datasets.Dataset` (string prompts become message lists)."""
        return rows_to_dataset(self.rows(), f"{self.taskset_id} source")

    def get_eval_dataset(self) -> Dataset:
        """The evaluation rows as a `datasets.Dataset` (string prompts become message lists)."""
        return rows_to_dataset(self.eval_rows(), f"{self.taskset_id} eval_source")


def rows_to_dataset(rows: list[dict[str, Any]], where: str) -> Dataset:
    """Rows as a `datasets.Dataset`, string prompts as message lists.

    Raises:
        TaskError: naming the first row whose field holds another kind of value than earlier rows.
    """
    import pyarrow
    from datasets import Dataset

    rows = [_prompt_as_messages(row) for row in rows]
    try:
        return Dataset.from_list(rows)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError) as error:
        raise TaskError(_column_kind_mismatch(rows, where) or f"{where}: rows can't form a dataset: {error}") from None


def _prompt_as_messages(row: dict[str, Any]) -> dict[str, Any]:
    if isinstance(row.get("prompt"), str):
        return {**row, "prompt": [{"role": "user", "content": row["prompt"]}]}
    return row


def _value_kind(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (bool, int, float)):
        return "a number"
    return type(value).__name__


def _column_kind_mismatch(rows: list[dict[str, Any]], where: str) -> str | None:
    first_seen: dict[str, tuple[str, int]] = {}
    for index, row in enumerate(rows):
        for field, value in row.items():
            kind = _value_kind(value)
            if kind is None:
                continue
            seen = first_seen.setdefault(field, (kind, index))
            if seen[0] != kind:
                return (
                    f"{where} row {index}: field {field!r} is {kind} but row {seen[1]} has {seen[0]}; "
                    "a dataset column holds one kind of value"
                )
    return None


LoaderFn = Callable[[], Iterable[Mapping[str, Any]]]
Split = Literal["train", "eval"]

__all__ = ["LoaderFn", "Taskset", "rows_to_dataset"]
