"""Parts by name: client types, endpoint dialects, sandbox backends, harnesses and tasksets, one Protocol per family.

A third-party package adds a part with an entry point in the family's group (``v1.clients``, ``v1.dialects``,
``v1.sandbox_backends``, ``v1.harnesses``, ``v1.tasksets``); v1's bundled harnesses and tasksets are its own
entry points in ``pyproject.toml``.
"""

from v1.registry._families import (
    CLIENT_TYPES,
    DIALECTS,
    HARNESSES,
    SANDBOX_BACKENDS,
    TASKSETS,
    ClientPart,
    DialectPart,
    HarnessLoader,
    SandboxBackendPart,
    TasksetLoader,
)
from v1.registry._registry import BUILT_IN, Entry, Registry, class_with, factory_of, object_with

__all__ = [
    "BUILT_IN",
    "CLIENT_TYPES",
    "DIALECTS",
    "HARNESSES",
    "SANDBOX_BACKENDS",
    "TASKSETS",
    "ClientPart",
    "DialectPart",
    "Entry",
    "HarnessLoader",
    "Registry",
    "SandboxBackendPart",
    "TasksetLoader",
    "class_with",
    "factory_of",
    "object_with",
]
