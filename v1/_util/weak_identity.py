"""`WeakIdentityMap`: values kept for objects, by identity, for as long as each object lives.

`weakref.WeakKeyDictionary` does the same in Python code, making a new weak reference on every
lookup (~1 us); the rollout's hot path looks up its upstream handles, loop scope and client
several times a rollout. Here a lookup is one C-level `dict.get` on `id(key)`: the entry's weak
reference, made once when it is stored, removes the entry as the key is collected, before its
id can be given to another object.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class WeakIdentityMap(Generic[K, V]):
    """A mapping from live objects, compared by identity, to values; an entry goes when its key is collected."""

    __slots__ = ("__weakref__", "_entries", "_forget", "_idents")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[K], V]] = {}
        self._idents: dict[int, int] = {}
        """Each live entry's key id, by the id of its weak reference: what the shared callback needs to find it."""
        self._forget = _forgetter(weakref.ref(self))

    def get(self, key: K) -> V | None:
        """The value stored for `key`, or None."""
        entry = self._entries.get(id(key))
        return None if entry is None else entry[1]

    def __setitem__(self, key: K, value: V) -> None:
        ident = id(key)
        entry = self._entries.get(ident)
        if entry is None:
            reference = weakref.ref(key, self._forget)
            self._idents[id(reference)] = ident
        else:
            reference = entry[0]
        self._entries[ident] = (reference, value)

    def pop(self, key: K) -> V | None:
        """Remove `key`'s entry; its value, or None."""
        entry = self._entries.pop(id(key), None)
        if entry is None:
            return None
        self._idents.pop(id(entry[0]), None)
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)


def _forgetter(owner_ref: weakref.ref[WeakIdentityMap[K, V]]) -> Callable[[weakref.ref[K]], None]:
    """The callback every key's weak reference of one map shares (one per map, not one per key): drop the entry."""

    def forget(reference: weakref.ref[K]) -> None:
        mapping = owner_ref()
        if mapping is not None:
            ident = mapping._idents.pop(id(reference), None)
            if ident is not None:
                entry = mapping._entries.get(ident)
                if entry is not None and entry[0] is reference:
                    del mapping._entries[ident]

    return forget


__all__ = ["WeakIdentityMap"]
