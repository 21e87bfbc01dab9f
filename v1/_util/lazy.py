"""A package's names whose modules load on first use (PEP 562), for packages whose modules are slow or heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for `package`: each name in `homes` is imported from its module when first read.

    A name whose home is the package's own submodule of that name (``"env": "v1.env"``) is that submodule.

    Args:
        package: the package's dotted name.
        homes: name -> the module that defines it.
    """

    def __getattr__(name: str) -> object:
        if name in homes:
            home = importlib.import_module(homes[name])
            return home if home.__name__ == f"{package}.{name}" else getattr(home, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["lazy_attributes"]
