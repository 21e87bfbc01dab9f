"""Parts by name: client types, endpoint dialects, sandbox backends, harnesses and tasksets.

Each family has one `Registry`. Built-ins are declared below by name and ``"module:object"``
reference, exactly as a plugin declares itself, and imported on first use. A third-party package
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

import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from v1.errors import PluginError, UnknownNameError

T = TypeVar("T")
logger = logging.getLogger(__name__)

BUILT_IN = "built in"
IN_CODE = "registered in code"
REFERENCE = "a module:object reference"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
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
        built_ins: name -> ``module:object`` reference of each built-in.
    """

    def __init__(self, kind: str, group: str, check: Callable[[object], str | None], built_ins: Mapping[str, str]) -> None:
        self.kind, self.group, self.check = kind, group, check
        self._entries: dict[str, Entry] = {name: Entry(ref, BUILT_IN) for name, ref in built_ins.items()}
        self._loaded: dict[str, T] = {}
        self._clashes: dict[str, str] = {}
        self._discovered = False

    def register(self, name: str, target: T | str) -> None:
        """Make `target` (the part, or its ``module:object`` reference) available as `name`.

        Registering the same part again is allowed; another part under a taken name is not.

        Raises:
            PluginError: `name` is malformed or taken.
        """
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise PluginError(f"{self.kind} name {name!r}: use letters, digits, '_', '.' or '-' (at most 100)")
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
            raise UnknownNameError(self.kind, name, self.names())
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
        """Every name of this family, plugins included: built-ins first, in their declared order."""
        self._discover()
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
            raise UnknownNameError(self.kind, name, self.names())
        return self._entries[name].origin

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._entries:
            self._discover()
        return name in self._entries

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

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for point in _unique(entry_points(group=self.group)):
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


def class_with(*methods: str) -> Callable[[object], str | None]:
    """A check: the part is a class defining `methods`."""

    def check(part: object) -> str | None:
        if isinstance(part, type) and all(callable(getattr(part, method, None)) for method in methods):
            return None
        return f"is {_kind_of(part)}, not a class with {', '.join(methods)}"

    return check


def factory_of(*methods: str) -> Callable[[object], str | None]:
    """A check: the part is a class defining `methods`, or another callable (a factory, checked when called)."""
    as_class = class_with(*methods)

    def check(part: object) -> str | None:
        if isinstance(part, type):
            return as_class(part)
        return None if callable(part) else f"is {_kind_of(part)}, not a class or factory with {', '.join(methods)}"

    return check


def object_with(*attributes: str) -> Callable[[object], str | None]:
    """A check: the part is an object (not a class) with `attributes`."""

    def check(part: object) -> str | None:
        if not isinstance(part, type) and all(hasattr(part, attribute) for attribute in attributes):
            return None
        return f"is {_kind_of(part)}, not an object with {', '.join(attributes)}"

    return check


def _kind_of(part: object) -> str:
    """``a class Name`` for a class, else its type with an article (``an int``)."""
    if isinstance(part, type):
        return f"a class {part.__qualname__}"
    name = type(part).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


CLIENT_TYPES: Registry[Any] = Registry(
    "client type",
    "v1.clients",
    class_with("get_response", "stream_response"),
    {
        "openai_chat_completions": "v1.clients.openai_chat_completions:OpenAIChatCompletionsClient",
        "openai_chat_completions_token": "v1.clients.openai_chat_completions_token:OpenAIChatCompletionsTokenClient",
        "openai_completions": "v1.clients.openai_completions:OpenAICompletionsClient",
        "openai_responses": "v1.clients.openai_responses:OpenAIResponsesClient",
        "anthropic_messages": "v1.clients.anthropic_messages:AnthropicMessagesClient",
        "renderer": "v1.clients.renderer:RendererClient",
        "nemorl_chat_completions": "v1.clients.nemorl_chat_completions:NeMoRLChatCompletionsClient",
    },
)
"""`ClientConfig.client_type`: a `v1.clients.Client` subclass by name (entry-point group ``v1.clients``)."""

DIALECTS: Registry[Any] = Registry(
    "dialect",
    "v1.dialects",
    object_with("name", "prefix", "route", "path_pattern"),
    {
        "chat_completions": "v1.interception.chat_completions:DIALECT",
        "completions": "v1.interception.completions:DIALECT",
        "responses": "v1.interception.responses:DIALECT",
        "messages": "v1.interception.messages:DIALECT",
        "gemini": "v1.interception.gemini:DIALECT",
    },
)
"""The endpoint's wire formats: a `v1.interception.dialect.Dialect` by name (entry-point group ``v1.dialects``)."""

SANDBOX_BACKENDS: Registry[Any] = Registry(
    "sandbox backend",
    "v1.sandbox_backends",
    factory_of("available", "create", "delete"),
    {"local": "v1.sandbox._local:LocalBackend", "prime": "v1.sandbox._prime:PrimeBackend"},
)
"""`SandboxConfig.backend`: a `v1.sandbox.SandboxBackend` class or factory by name (group ``v1.sandbox_backends``)."""

HARNESSES: Registry[Any] = Registry(
    "harness",
    "v1.harnesses",
    factory_of(),
    {
        "claude_code": "harnesses.claude_code:ClaudeCodeHarness",
        "codex": "harnesses.codex:CodexHarness",
        "command": "harnesses.command:CommandAgentHarness",
        "gemini_cli": "harnesses.gemini_cli:GeminiCliHarness",
        "mini_swe_agent": "harnesses.mini_swe_agent:MiniSweAgentHarness",
        "openai_agents": "harnesses.openai_agents:OpenAIAgentsHarness",
        "opencode": "harnesses.opencode:OpenCodeHarness",
        "pi": "harnesses.pi:PiHarness",
        "replay": "harnesses.replay:ReplayHarness",
        "rlm": "harnesses.rlm:RLMHarness",
        "terminus": "harnesses.terminus:TerminusHarness",
    },
)
"""``[env.harness] loader = "NAME"``: a `Harness` class or loader function by name (group ``v1.harnesses``)."""

TASKSETS: Registry[Any] = Registry(
    "taskset",
    "v1.tasksets",
    factory_of(),
    {
        name: f"tasksets.{name}:load_taskset"
        for name in (
            "alphabet_sort",
            "competition_math",
            "first_letter",
            "gsm8k",
            "hangman",
            "harbor",
            "math_python",
            "reverse_text",
            "swe",
            "wiki_search",
            "wordle",
        )
    },
)
"""``[env.taskset] loader = "NAME"`` and ``v1 eval NAME``: a `Taskset` class or loader function by name
(group ``v1.tasksets``)."""


__all__ = [
    "CLIENT_TYPES",
    "DIALECTS",
    "HARNESSES",
    "SANDBOX_BACKENDS",
    "TASKSETS",
    "Entry",
    "Registry",
    "class_with",
    "factory_of",
    "object_with",
]
