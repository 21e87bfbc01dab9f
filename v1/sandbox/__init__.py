"""Sandboxes: one backend protocol, backends by name, and safe create/delete.

`local` (bubblewrap) and `prime` (prime-sandboxes) are built in; add a backend
with `register_backend(name, factory)` or, from another package, an entry point
in the ``v1.sandbox_backends`` group (see `v1.registry`).
"""

from v1.sandbox._backend import (
    PIN_HEADER,
    EndpointTarget,
    ExecResult,
    OutputCallback,
    Sandbox,
    SandboxBackend,
    SandboxRecord,
    Workspace,
    backend_names,
    get_backend,
    register_backend,
)
from v1.sandbox._egress_proxy import network_tally
from v1.sandbox._host_files import copy_into, read_bytes, read_host_file, write_bytes
from v1.sandbox._limits import limits_description
from v1.sandbox._local import INSTALL_HINT, LocalBackend, LocalSandbox, sandbox_root
from v1.sandbox._manager import SandboxManager, get_manager, list_sandboxes, max_sandboxes, reap_sandboxes
from v1.sandbox._prime import PrimeBackend, StaticTunnel, Tunnel
from v1.sandbox._process import run_process
from v1.sandbox._repl import PythonRepl
from v1.sandbox._scopes import RolloutSandboxes, SandboxScopes

__all__ = [
    "EndpointTarget",
    "ExecResult",
    "INSTALL_HINT",
    "LocalBackend",
    "LocalSandbox",
    "OutputCallback",
    "PIN_HEADER",
    "PrimeBackend",
    "PythonRepl",
    "RolloutSandboxes",
    "Sandbox",
    "SandboxBackend",
    "SandboxManager",
    "SandboxRecord",
    "SandboxScopes",
    "StaticTunnel",
    "Tunnel",
    "Workspace",
    "backend_names",
    "copy_into",
    "get_backend",
    "get_manager",
    "limits_description",
    "list_sandboxes",
    "max_sandboxes",
    "network_tally",
    "read_bytes",
    "read_host_file",
    "reap_sandboxes",
    "register_backend",
    "run_process",
    "sandbox_root",
    "write_bytes",
]
