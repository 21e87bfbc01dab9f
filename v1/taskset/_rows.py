"""Where a taskset's rows come from: a list loaded once, or a stream drawn on demand.

A source is a *list* when it loads to a sequence (a list, a tuple, a `datasets.Dataset`): it is
loaded once, kept, and its rows get their position as `example_id`, as always. Anything else that
iterates (a generator, a loader returning an iterator, an `IterableDataset`) is a *stream*: its rows
are drawn when asked for, never kept, and a row without an `example_id` gets a key derived from its
content (`content_key`), so a resumed run finds the same rows under the same ids.

`HeadRows`, `ShuffleRows` and `ViewRows` wrap another source (`Taskset.head`, `.shuffle`, `.view`);
each is immutable and draws from the source it wraps only as its own rows are drawn.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from v1.config import import_ref
from v1.errors import ConfigError, Error, TaskError

Row = dict[str, Any]
RowView = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def content_key(row: Mapping[str, Any]) -> str:
    """A row's key from its content: the first 16 hex digits of the SHA-256 of its canonical JSON."""
    canonical = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _with_prompt(row: Mapping[str, Any]) -> Row:
    row = dict(row)
    if "prompt" not in row and "question" in row:
        row["prompt"] = [{"role": "user", "content": row["question"]}]
    return row


def _checked(row: Any, field: str, index: int) -> Mapping[str, Any]:
    if not isinstance(row, Mapping):
        raise TaskError(f"{field} row {index}: expected a mapping, got {type(row).__name__}")
    return row


def _is_listed(value: Any) -> bool:
    """Rows by position and a length: a list or tuple, or a `datasets.Dataset` (not an `IterableDataset`)."""
    if isinstance(value, (str, bytes, Mapping)):
        return False
    return isinstance(value, Sequence) or (hasattr(value, "__getitem__") and hasattr(value, "__len__"))


def _is_dataset(value: Any) -> bool:
    return type(value).__name__ in ("Dataset", "IterableDataset") and hasattr(value, "column_names")


class RowSource(ABC):
    """Rows of a taskset: `draw()` iterates them afresh; `listed()` is the kept list of a finite list source."""

    field: str
    """What the rows are called in errors (`source`, `eval_source`)."""
    infinite: bool = False
    """Whether drawing never ends (declared by the taskset: `infinite = true`)."""

    @abstractmethod
    def draw(self) -> Iterator[Row]:
        """The rows, drawn one at a time."""

    @abstractmethod
    def listed(self) -> list[Row] | None:
        """The rows as a list when they are a finite list loaded once; None for a stream."""

    def head(self, n: int) -> RowSource:
        """The first `n` rows (n >= 1)."""
        return HeadRows(self, n)

    def shuffle(self, seed: int, buffer: int | None = None) -> RowSource:
        """The rows in a seeded random order (`buffer` rows held at a time; None: all, a finite source only)."""
        return ShuffleRows(self, seed, buffer)

    def view(self, transform: RowView) -> RowSource:
        """Each row passed through `transform`."""
        return ViewRows(self, transform)


class LoadedRows(RowSource):
    """A `source`/`eval_source` value: rows, a zero-argument loader, a `datasets.Dataset`, or a `module:object` ref.

    Args:
        source: the value (None: no rows).
        field: its name in errors.
        infinite: a stream that never ends (a list source is finite whatever this says).
    """

    def __init__(self, source: Any, field: str, infinite: bool = False) -> None:
        self.source = source
        self.field = field
        self.infinite = infinite
        self._resolved = False
        self._list: list[Row] | None = None
        self._loader: Callable[[], Any] | None = None
        self._fresh: Iterable[Any] | None = None
        """The iterable loaded while resolving, drawn by the first `draw()` (a loader is called once per draw)."""

    def _resolve(self) -> None:
        if self._resolved:
            return
        source = self.source
        if isinstance(source, str):
            source = import_ref(source, self.field)
        if callable(source) and not _is_dataset(source):
            self._loader = source
            source = source()
        if source is None:
            source = []
        if isinstance(source, Mapping) or not isinstance(source, Iterable):
            what = "a single mapping" if isinstance(source, Mapping) else type(source).__name__
            raise TaskError(f"{self.field}: expected rows (an iterable of mappings, a loader or a datasets.Dataset), got {what}")
        if _is_listed(source):
            self._list = [_with_prompt(_checked(row, self.field, index)) for index, row in enumerate(source)]
            for index, row in enumerate(self._list):
                row.setdefault("example_id", index)
            self.infinite = False
        else:
            self._fresh = source
        self._resolved = True

    def listed(self) -> list[Row] | None:
        self._resolve()
        return self._list

    def draw(self) -> Iterator[Row]:
        self._resolve()
        if self._list is not None:
            return iter(self._list)
        return self._draw_stream(self._next_iterable())

    def _next_iterable(self) -> Iterable[Any]:
        if self._fresh is not None:
            fresh, self._fresh = self._fresh, None
            return fresh
        if self._loader is not None:
            return self._loader()
        raise TaskError(
            f"{self.field}: a generator object can be drawn only once; pass the generator function (a loader) to draw it again"
        )

    def _draw_stream(self, rows: Iterable[Any]) -> Iterator[Row]:
        for index, row in enumerate(_drawn(rows, self.field)):
            row = _checked(row, self.field, index)
            yield {**_with_prompt(row), "example_id": row["example_id"] if "example_id" in row else content_key(row)}


def _drawn(rows: Iterable[Any], field: str) -> Iterator[Any]:
    """The rows of user code, with anything but a `v1.Error` it raises while drawing one turned into a `TaskError`."""
    iterator = iter(rows)
    for index in itertools.count():
        try:
            row = next(iterator)
        except StopIteration:
            return
        except Error:
            raise
        except Exception as exc:
            raise TaskError(f"{field} row {index}: drawing it raised {type(exc).__name__}: {exc}") from exc
        yield row


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what}: expected a positive integer, got {value!r}")
    return value


class HeadRows(RowSource):
    """The first `n` rows of another source (finite, whatever the source)."""

    def __init__(self, inner: RowSource, n: int) -> None:
        self.inner = inner
        self.n = _positive(n, "head(n)")
        self.field = inner.field

    def listed(self) -> list[Row] | None:
        rows = self.inner.listed()
        return None if rows is None else rows[: self.n]

    def draw(self) -> Iterator[Row]:
        rows = self.inner.draw()
        try:
            yield from itertools.islice(rows, self.n)
        finally:
            _close(rows)


class ShuffleRows(RowSource):
    """Another source's rows in a seeded random order.

    Without `buffer`, every row is drawn and held, then shuffled (a finite source only). With
    `buffer=b`, `b` rows are held: each row drawn takes the place of one picked at random, which is
    yielded (the same order for the same seed and buffer).
    """

    def __init__(self, inner: RowSource, seed: int, buffer: int | None = None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"shuffle(seed): expected an integer, got {seed!r}")
        if buffer is None and inner.infinite:
            raise ConfigError(
                f"shuffle: {inner.field} is infinite; pass buffer=N (the rows held while shuffling), e.g. shuffle(seed, buffer=1000)"
            )
        self.inner = inner
        self.seed = seed
        self.buffer = None if buffer is None else _positive(buffer, "shuffle(buffer)")
        self.field = inner.field
        self.infinite = inner.infinite

    def listed(self) -> list[Row] | None:
        return None if self.inner.listed() is None else list(self.draw())

    def draw(self) -> Iterator[Row]:
        generator = random.Random(self.seed)
        rows = self.inner.draw()
        try:
            if self.buffer is None:
                held = list(rows)
                generator.shuffle(held)
                yield from held
                return
            held = list(itertools.islice(rows, self.buffer))
            for row in rows:
                position = generator.randrange(len(held))
                yield held[position]
                held[position] = row
            generator.shuffle(held)
            yield from held
        finally:
            _close(rows)


class ViewRows(RowSource):
    """Another source's rows, each passed through `transform` (which returns the row to use)."""

    def __init__(self, inner: RowSource, transform: RowView) -> None:
        if not callable(transform):
            raise ConfigError(f"view(fn): expected a function of a row, got {type(transform).__name__}")
        self.inner = inner
        self.transform = transform
        self.field = inner.field
        self.infinite = inner.infinite
        self._list: list[Row] | None = None

    def listed(self) -> list[Row] | None:
        if self._list is None and self.inner.listed() is not None:
            self._list = list(self.draw())
        return self._list

    def draw(self) -> Iterator[Row]:
        rows = self.inner.draw()
        try:
            for index, row in enumerate(rows):
                try:
                    viewed = self.transform(row)
                except Error:
                    raise
                except Exception as exc:
                    raise TaskError(f"{self.field} row {index}: view raised {type(exc).__name__}: {exc}") from exc
                if not isinstance(viewed, Mapping):
                    raise TaskError(
                        f"{self.field} row {index}: view returned {type(viewed).__name__}, expected a mapping (the row)"
                    )
                yield {"example_id": row.get("example_id"), **_with_prompt(_without_stale_prompt(row, viewed))}
        finally:
            _close(rows)


def _without_stale_prompt(row: Row, viewed: Mapping[str, Any]) -> Mapping[str, Any]:
    """A viewed row whose `question` changed loses the prompt its old question became (the new one becomes it)."""
    derived = [{"role": "user", "content": row.get("question")}]
    if "question" in viewed and viewed["question"] != row.get("question") and viewed.get("prompt") == derived:
        return {key: value for key, value in viewed.items() if key != "prompt"}
    return viewed


def _close(rows: Iterator[Any]) -> None:
    close = getattr(rows, "close", None)
    if callable(close):
        close()


__all__ = ["HeadRows", "LoadedRows", "Row", "RowSource", "RowView", "ShuffleRows", "ViewRows", "content_key"]
