"""Sandboxes: one backend protocol, backends by name, and safe create/delete.

`local` (bubblewrap) and `prime` (prime-sandboxes) are built in; add a backend
with `register_backend(name, factory)` or, from another package, an entry point
in the ``v1.sandbox_backends`` group (see `v1.registry`).
"""

from v1.sandbox.backend import (
    EndpointTarget,
    ExecResult,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxRecord,
    backend_names,
    get_backend,
    register_backend,
)
from v1.sandbox.limits import limits_description
from v1.sandbox.local import INSTALL_HINT, LocalBackend, LocalSandbox, sandbox_root
from v1.sandbox.manager import SandboxManager, get_manager, list_sandboxes, max_sandboxes, reap_sandboxes
from v1.sandbox.prime import PrimeBackend, StaticTunnel, Tunnel

__all__ = [
    "INSTALL_HINT",
    "EndpointTarget",
    "ExecResult",
    "LocalBackend",
    "LocalSandbox",
    "OutputCallback",
    "PrimeBackend",
    "Sandbox",
    "SandboxBackend",
    "SandboxManager",
    "SandboxRecord",
    "StaticTunnel",
    "Tunnel",
    "backend_names",
    "get_backend",
    "get_manager",
    "limits_description",
    "list_sandboxes",
    "max_sandboxes",
    "reap_sandboxes",
    "register_backend",
    "sandbox_root",
]
