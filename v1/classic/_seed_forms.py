"""The seed's loose classic forms, kept in one place: dataset builders and free constructor keywords."""

from __future__ import annotations

import difflib
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

_built: dict[int, tuple[Callable[[], Any], Any]] = {}
_build_lock = threading.RLock()


def is_dataset_builder(dataset: Any) -> bool:
    """A ``dataset=`` that is a zero-argument builder (verifiers' published environments pass one)."""
    return callable(dataset) and not hasattr(dataset, "column_names") and not isinstance(dataset, type)


def built_once(builder: Callable[[], Any]) -> Any:
    """What `builder()` returns, called on first use and at most once per process."""
    with _build_lock:
        entry = _built.get(id(builder))
        if entry is None or entry[0] is not builder:
            entry = (builder, builder())
            _built[id(builder)] = entry
        return entry[1]


def set_free_attributes(owner: Any, kwargs: dict[str, Any], known: Iterable[str]) -> None:
    """Set each keyword as an attribute of `owner` (the seed's `set_kwargs`), warning once per near miss of a known name."""
    names = sorted(set(known))
    for key, value in kwargs.items():
        near = difflib.get_close_matches(key, names, n=1, cutoff=0.8)
        if near and near[0] != key:
            warnings.warn(
                f"{type(owner).__name__}: unknown setting {key!r} kept as an attribute; did you mean {near[0]!r}?",
                stacklevel=3,
            )
        setattr(owner, key, value)


__all__ = ["built_once", "is_dataset_builder", "set_free_attributes"]
