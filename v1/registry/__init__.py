"""Parts by name: client types, endpoint dialects, sandbox backends, harnesses and tasksets."""

from v1.registry._registry import (
    BUILT_IN,
    CLIENT_TYPES,
    DIALECTS,
    HARNESSES,
    SANDBOX_BACKENDS,
    TASKSETS,
    Entry,
    Registry,
    class_with,
    factory_of,
    object_with,
)

__all__ = [
    "BUILT_IN",
    "CLIENT_TYPES",
    "DIALECTS",
    "Entry",
    "HARNESSES",
    "Registry",
    "SANDBOX_BACKENDS",
    "TASKSETS",
    "class_with",
    "factory_of",
    "object_with",
]
