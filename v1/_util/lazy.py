"""A package's names whose modules load on first use (PEP 562), for packages whose modules are slow or heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for `package`: each name in `homes` is imported from its module when first read.

    Args:
        package: the package's dotted name (for the error message).
        homes: name -> the module that defines it.
    """

    def __getattr__(name: str) -> object:
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["lazy_attributes"]
