"""Run code written for ``import verifiers as vf`` on v1, unchanged: an opt-in import alias.

`install_verifiers_alias()` makes ``verifiers`` and its submodules (``verifiers.types``,
``verifiers.utils.data_utils``, ``verifiers.v1.types``, ...) resolve to v1's modules in this
process. It refuses when a real ``verifiers`` distribution is importable, so it never shadows one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from v1.errors import ConfigError

ALIAS = "verifiers"
TARGET = "v1.classic._verifiers"


class _AliasLoader(importlib.abc.Loader):
    """Loads an aliased name by importing its v1 module and handing that module back."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the v1 module was executed when it was imported."""


class VerifiersAliasFinder(importlib.abc.MetaPathFinder):
    """Maps ``verifiers[.x.y]`` onto ``v1.classic._verifiers[.x.y]``."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        mapped = TARGET + fullname[len(ALIAS) :]
        if importlib.util.find_spec(mapped) is None:  # verifiers.envs..., a module of verifiers' own
            raise ModuleNotFoundError(f"{fullname}: v1's verifiers alias does not provide this module", name=fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(mapped), is_package=True)


def _installed_finder() -> VerifiersAliasFinder | None:
    return next((f for f in sys.meta_path if isinstance(f, VerifiersAliasFinder)), None)


def install_verifiers_alias() -> None:
    """Let ``import verifiers as vf`` (and its submodules) resolve to v1 in this process.

    Raises:
        ConfigError: a real ``verifiers`` package is importable here (the alias never shadows it).
    """
    if _installed_finder() is not None:
        return
    real = importlib.util.find_spec(ALIAS) if ALIAS not in sys.modules else None
    if real is not None or (ALIAS in sys.modules and not sys.modules[ALIAS].__name__.startswith("v1")):
        where = real.origin if real is not None else getattr(sys.modules[ALIAS], "__file__", "?")
        raise ConfigError(
            f"--compat verifiers: a real 'verifiers' package is installed ({where}); "
            "run it with that package, or uninstall it to run on v1"
        )
    sys.meta_path.insert(0, VerifiersAliasFinder())


def uninstall_verifiers_alias() -> None:
    """Remove the alias and forget the ``verifiers`` modules it loaded."""
    finder = _installed_finder()
    if finder is not None:
        sys.meta_path.remove(finder)
    for name in [n for n in sys.modules if n == ALIAS or n.startswith(ALIAS + ".")]:
        del sys.modules[name]


__all__ = ["VerifiersAliasFinder", "install_verifiers_alias", "uninstall_verifiers_alias"]
