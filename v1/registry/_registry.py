"""Parts by name: client types, endpoint dialects, sandbox backends, harnesses and tasksets.

Each family has one `Registry` (`v1.registry`'s `_families.py`, one Protocol per family). Built-ins are v1's own
entry points in the family's group (``pyproject.toml``), declared by name and ``"module:object"`` reference exactly
as a plugin declares itself, and imported on first use: the registry names no module of the packages above it.
When v1's metadata declares none (a stale install), a lookup says to reinstall. A third-party package
adds a part with a Python entry point in the family's group::

    [project.entry-points."v1.sandbox_backends"]
    docker = "v1_docker:DockerBackend"

after which ``pip install`` is enough: ``[env.harness.sandbox] backend = "docker"`` works. Entry
points are read the first time a name is not already known (never at import). A plugin cannot
take a built-in's name: the built-in keeps it and the plugin is refused with a warning naming its
distribution. A ``module:object`` reference is accepted wherever a name is. Every unknown name
raises `UnknownNameError`, one line naming the family, the name, the known names and the closest one.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

import tomllib

from v1.errors import PluginError, UnknownNameError

T = TypeVar("T")
logger = logging.getLogger("v1.registry")

BUILT_IN = "built in"
IN_CODE = "registered in code"
REFERENCE = "a module:object reference"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
OWN_DISTRIBUTION = "v1"
SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent
"""The folder holding the `v1` package: a source checkout when it has v1's ``pyproject.toml``."""
REF_PATTERN = re.compile(r"(?=.{3,200}$)[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Entry:
    """One named part: the object itself or a ``module:object`` reference to it, and where it came from."""

    target: object
    origin: str


class Registry(Generic[T]):
    """The parts of one family, by name: built-ins, parts registered in code, then entry-point plugins.

    Args:
        kind: the family's name in messages (``sandbox backend``).
        group: the entry-point group plugins declare themselves in (``v1.sandbox_backends``).
        check: why an object is not a part of this family (None when it is).
        built_ins: name -> ``module:object`` reference of each built-in; None (v1's own families): v1's own entry
            points in `group` (`bundled_points`), read on the first lookup. v1 declares built-ins in each of its
            groups, so finding none there means its metadata is stale, and every lookup says to reinstall.
    """

    def __init__(
        self, kind: str, group: str, check: Callable[[object], str | None], built_ins: Mapping[str, str] | None = None
    ) -> None:
        self.kind, self.group, self.check = kind, group, check
        self._entries: dict[str, Entry] = {name: Entry(ref, BUILT_IN) for name, ref in (built_ins or {}).items()}
        self._loaded: dict[str, T] = {}
        self._clashes: dict[str, str] = {}
        self._built_ins_read = built_ins is not None
        self._no_built_ins: str | None = None
        self._discovered = False

    def register(self, name: str, target: T | str) -> None:
        """Make `target` (the part, or its ``module:object`` reference) available as `name`.

        Registering the same part again is allowed; another part under a taken name is not.

        Raises:
            PluginError: `name` is malformed or taken.
        """
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise PluginError(f"{self.kind} name {name!r}: use letters, digits, '_', '.' or '-' (at most 100)")
        self._read_built_ins()
        taken = self._entries.get(name)
        if taken is not None and not self._same(name, target):
            raise PluginError(f"{self.kind} {name!r} is taken ({taken.origin}: {_describe(taken.target)}); choose another name")
        self._entries[name] = Entry(target, taken.origin if taken else IN_CODE)
        self._loaded.pop(name, None)

    def get(self, name: str) -> T:
        """The part registered as `name`, or named by a ``module:object`` reference, imported and checked on first use.

        Raises:
            UnknownNameError: no part has that name.
            PluginError: the part fails to import, is not of this family, or two plugins claim the name.
        """
        if isinstance(name, str) and name in self._loaded:
            return self._loaded[name]
        if isinstance(name, str) and ":" in name and name not in self._entries:
            if not REF_PATTERN.fullmatch(name):
                raise PluginError(f"{self.kind} {_shown(name)}: not a name, nor a 'module:object' reference")
            entry = Entry(name, REFERENCE)
        elif not isinstance(name, str) or name not in self:
            raise self._unknown(name)
        elif name in self._clashes:
            raise PluginError(self._clashes[name])
        else:
            entry = self._entries[name]
        part = self._import(name, entry)
        problem = self.check(part)
        if problem is not None:
            raise PluginError(f"{self._label(name, entry)} {problem}")
        self._loaded[name] = part
        return part

    def names(self) -> list[str]:
        """Every name of this family, plugins included: built-ins first, in their declared order.

        Raises:
            PluginError: v1's metadata declares none of its built-ins (a stale install).
        """
        self._discover()
        if self._no_built_ins is not None:
            raise PluginError(self._no_built_ins)
        return list(self._entries)

    def values(self) -> list[T]:
        """Every part of this family, plugins included (each imported)."""
        return [self.get(name) for name in self.names()]

    def origin(self, name: str) -> str:
        """Where the part `name` comes from: built in, registered in code, which distribution's entry point,
        or a reference."""
        if name in self._loaded and name not in self._entries:
            return REFERENCE
        if name not in self:
            raise self._unknown(name)
        return self._entries[name].origin

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._entries:
            self._read_built_ins()
        if name not in self._entries:
            self._discover()
        return name in self._entries

    def _unknown(self, name: object) -> PluginError | UnknownNameError:
        """The error for a name this family lacks: the stale install when v1's built-ins are missing, else unknown."""
        if self._no_built_ins is not None:
            return PluginError(self._no_built_ins)
        return UnknownNameError(self.kind, name, self.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _label(self, name: str, entry: Entry) -> str:
        if entry.origin == REFERENCE:
            return f"{self.kind} reference {name!r}"
        return f"{self.kind} {name!r} ({entry.origin}): {_describe(entry.target)}"

    def _same(self, name: str, target: object) -> bool:
        try:
            current = self._import(name, self._entries[name])
            return current is (_import_ref(target) if isinstance(target, str) else target)
        except Exception:
            return False

    def _import(self, name: str, entry: Entry) -> Any:
        if not isinstance(entry.target, str):
            return entry.target
        try:
            return _import_ref(entry.target)
        except Exception as exc:
            raise PluginError(f"{self._label(name, entry)} failed to import: {type(exc).__name__}: {exc}") from exc

    def _read_built_ins(self) -> None:
        """Take v1's own entry points in the group as built-ins, once; a name declared twice with two references
        is refused when used, as two plugins claiming one name are."""
        if self._built_ins_read:
            return
        self._built_ins_read = True
        declared = bundled_points(self.group)
        if not declared:
            self._no_built_ins = (
                f"no built-in {self.kind} is installed: v1's metadata declares no entry points in group {self.group!r} "
                "(a stale install); reinstall v1, e.g. `pip install -e .` in its checkout"
            )
        for name, value in declared:
            taken = self._entries.setdefault(name, Entry(value, BUILT_IN))
            if taken.target != value:
                self._clashes[name] = (
                    f"{self.kind} {name!r} is declared twice by v1's metadata ({taken.target!r}; {value!r}); reinstall v1"
                )

    def _discover(self) -> None:
        self._read_built_ins()
        if self._discovered:
            return
        self._discovered = True
        for point in _unique(entry_points(group=self.group)):
            if _distribution(point) == OWN_DISTRIBUTION:
                continue
            origin = f"entry point of distribution {_distribution(point)!r}"
            taken = self._entries.get(point.name)
            if taken is None:
                self._entries[point.name] = Entry(point.value, origin)
            elif taken.origin in (BUILT_IN, IN_CODE):
                logger.warning(
                    f"{self.kind} {point.name!r} from the {origin} is refused: the name is {taken.origin} "
                    f"({_describe(taken.target)}); the plugin must use another name"
                )
            else:
                self._clashes[point.name] = (
                    f"{self.kind} {point.name!r} is claimed by two plugins ({taken.origin}: {taken.target!r}; "
                    f"{origin}: {point.value!r}); uninstall one"
                )


@functools.cache
def bundled_points(group: str) -> tuple[tuple[str, str], ...]:
    """The entry points v1 itself declares in `group`, as (name, reference) pairs in declared order: its built-ins.

    Run from a source checkout (an editable install or ``PYTHONPATH``), the checkout's own ``pyproject.toml``
    declares them, so a stale install's metadata cannot hide or resurrect one; an installed wheel has no
    ``pyproject.toml`` beside the package and its metadata is the declaration (a `v1` found twice on `sys.path`
    lists its points twice: each pair is kept once).
    """
    pyproject = SOURCE_ROOT / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == OWN_DISTRIBUTION:
            return tuple(project.get("entry-points", {}).get(group, {}).items())
    own = [point for point in entry_points(group=group) if _distribution(point) == OWN_DISTRIBUTION]
    return tuple((point.name, point.value) for point in _unique(own))


def _unique(points: Iterable[EntryPoint]) -> list[EntryPoint]:
    """Entry points once each: a distribution found twice on `sys.path` declares its points twice."""
    seen: dict[tuple[str, str], EntryPoint] = {}
    for point in points:
        seen.setdefault((point.name, point.value), point)
    return list(seen.values())


def _distribution(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return str(dist.name) if dist is not None else "?"


def _import_ref(ref: str) -> Any:
    """The object a ``module:object`` (or plain ``module``) reference names."""
    module_name, _, attr_path = ref.partition(":")
    target: Any = importlib.import_module(module_name.strip())
    for attr in filter(None, attr_path.strip().split(".")):
        target = getattr(target, attr)
    return target


def _shown(name: str) -> str:
    return repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."


def _describe(target: object) -> str:
    if isinstance(target, str):
        return repr(target)
    if hasattr(target, "__qualname__"):
        return f"{getattr(target, '__module__', '?')}:{target.__qualname__}"
    shown = repr(target)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def members(protocol: type) -> tuple[str, ...]:
    """The public names a family's Protocol declares (methods, properties and annotated attributes), in order."""
    declared = [name for name in vars(protocol) if not name.startswith("_")]
    return tuple(dict.fromkeys([*getattr(protocol, "__annotations__", {}), *declared]))


def _names(spec: tuple[str | type, ...]) -> tuple[str, ...]:
    return tuple(name for item in spec for name in ((item,) if isinstance(item, str) else members(item)))


def class_with(*methods: str | type) -> Callable[[object], str | None]:
    """A check: the part is a class defining `methods` (names, or a Protocol's members)."""
    names = _names(methods)

    def check(part: object) -> str | None:
        if isinstance(part, type) and all(callable(getattr(part, method, None)) for method in names):
            return None
        return f"is {_kind_of(part)}, not a class with {', '.join(names)}"

    return check


def factory_of(*methods: str | type) -> Callable[[object], str | None]:
    """A check: the part is a class defining `methods` (names, or a Protocol's members), or another callable (a
    factory, checked when called)."""
    names = _names(methods)
    as_class = class_with(*names)

    def check(part: object) -> str | None:
        if isinstance(part, type):
            return as_class(part)
        return None if callable(part) else f"is {_kind_of(part)}, not a class or factory with {', '.join(names)}"

    return check


def object_with(*attributes: str | type) -> Callable[[object], str | None]:
    """A check: the part is an object (not a class) with `attributes` (names, or a Protocol's members)."""
    names = _names(attributes)

    def check(part: object) -> str | None:
        if not isinstance(part, type) and all(hasattr(part, attribute) for attribute in names):
            return None
        return f"is {_kind_of(part)}, not an object with {', '.join(names)}"

    return check


def _kind_of(part: object) -> str:
    """``a class Name`` for a class, else its type with an article (``an int``)."""
    if isinstance(part, type):
        return f"a class {part.__qualname__}"
    name = type(part).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


__all__ = ["BUILT_IN", "Entry", "Registry", "class_with", "factory_of", "members", "object_with"]
