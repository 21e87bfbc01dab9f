"""The Prime CLI plugin: which of this project's command modules ``prime`` runs, and how.

``prime`` reads `get_plugin()` and runs ``python -m <module> ARGS``; each module the plugin
names is a real `v1.cli` command module (``python -m v1.cli._eval --help`` works). Commands
this project does not have (``gepa``, ``install``, ``setup``, ``build``) are None.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields

PRIME_PLUGIN_API_VERSION = 1
"""The plugin contract's version, for compatibility checks between ``prime`` and v1."""


@dataclass(frozen=True)
class PrimeCLIPlugin:
    """The command modules ``prime`` runs (None: no such command here)."""

    api_version: int = PRIME_PLUGIN_API_VERSION
    eval_module: str | None = "v1.cli._eval"
    gepa_module: str | None = None
    install_module: str | None = None
    init_module: str | None = "v1.cli._init"
    setup_module: str | None = None
    build_module: str | None = None

    def modules(self) -> list[str]:
        """The module names this plugin offers."""
        names = [getattr(self, field.name) for field in fields(self) if field.name.endswith("_module")]
        return [name for name in names if name is not None]

    def build_module_command(self, module_name: str, args: Sequence[str] | None = None) -> list[str]:
        """The subprocess command ``[python, -m, module_name, *args]``.

        Raises:
            ValueError: `module_name` is not one of this plugin's modules, or an argument is not a string.
        """
        if module_name not in self.modules():
            raise ValueError(f"PrimeCLIPlugin: {module_name!r} is not one of its modules ({', '.join(self.modules())})")
        arguments = list(args or [])
        if isinstance(args, str) or not all(isinstance(argument, str) for argument in arguments):
            raise ValueError(f"PrimeCLIPlugin: args must be a sequence of strings, got {args!r:.80}")
        return [sys.executable, "-m", module_name, *arguments]


def get_plugin() -> PrimeCLIPlugin:
    """The plugin instance ``prime`` consumes."""
    return PrimeCLIPlugin()


__all__ = ["PRIME_PLUGIN_API_VERSION", "PrimeCLIPlugin", "get_plugin"]
