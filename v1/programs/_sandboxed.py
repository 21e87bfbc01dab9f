"""Sandboxed Python programs (`{"fn": "pkg.module:run", "sandbox": ...}`) and the sandboxed base loop.

A sandboxed `fn` resolves its owning local package (a single-file module: the
`pyproject.toml` beside it; a package: the `pyproject.toml` inside its
directory), uploads it, installs it with its `[project.dependencies]` into the
sandbox (once per sandbox), and runs the function there with the task and a
state proxy. The proxy's model calls go to the rollout's endpoint; its field
writes, `stop()` and tool calls reach the host rollout through a control
socket of its own; a returned mapping is merged into the state (its own state,
or None, merges nothing more: its writes already went home). A program is
untrusted input: it may write only its own fields (not `FRAMEWORK_FIELDS`),
and its task and state reach it on stdin, never in argv.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from v1.config import ProgramConfig
from v1.errors import ConfigError, SandboxError, StateFieldError
from v1.programs._artifacts import collect_artifacts, declared_artifacts
from v1.programs._base_loop import base_loop
from v1.programs._command import (
    check_exec_size,
    endpoint_env,
    prepare_workspace,
    raise_for_result,
    record_result,
    resolve_bindings,
    run_setup,
)
from v1.programs._install import install_project
from v1.rollout import thaw
from v1.sandbox import Sandbox, read_host_file, sandbox_root

if TYPE_CHECKING:
    from v1.rollout import RolloutContext, State, Task

RUNNER = Path(__file__).with_name("_fn_runner.py")
PACKAGE_DIR = ".v1"
FRAMEWORK_FIELDS = frozenset(
    {"example_id", "trajectory_id", "prompt", "completion", "model", "reward", "advantage", "metrics", "timing", "token_usage"}
)
"""Fields a sandboxed program may not write besides the managed ones: the rollout's identity and scores."""


def guard_program_write(state: State, key: object, value: Any) -> None:
    """Write a sandboxed program's field into the host state, if it is the program's to write.

    Raises:
        StateFieldError: `key` is not a string, names a managed field, or one of `FRAMEWORK_FIELDS`.
    """
    if not isinstance(key, str):
        raise StateFieldError(f"state keys are strings, not {type(key).__name__}")
    if key in FRAMEWORK_FIELDS:
        raise StateFieldError(
            f"state[{key!r}] is set by the framework (the rollout's identity or score); a sandboxed program can't write it"
        )
    state[key] = value  # the in-process guard refuses managed fields


def find_package(ref: str) -> Path:
    """The local project directory (holding `pyproject.toml`) that owns the module of `ref`.

    Raises:
        ConfigError: the module can't be found, or has no `pyproject.toml` where the rules say.
    """
    return locate_package(ref)[0]


def locate_package(ref: str) -> tuple[Path, bool]:
    """`find_package`'s directory, and whether it is the package directory itself (else a single-file module's).

    Raises:
        ConfigError: the module can't be found, or has no `pyproject.toml` where the rules say.
    """
    module_name = ref.partition(":")[0]
    root_name = module_name.split(".")[0]
    try:
        spec = importlib.util.find_spec(root_name)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"program.fn {ref!r}: cannot find module {root_name!r}: {exc}") from None
    if spec is None or spec.origin is None:
        raise ConfigError(f"program.fn {ref!r}: module {root_name!r} is not importable here (is it on sys.path?)")
    origin = Path(spec.origin).resolve()
    if spec.submodule_search_locations:
        project, rule = origin.parent, f"inside the package directory {origin.parent}"
    else:
        project, rule = origin.parent, f"beside the module file {origin}"
    if not (project / "pyproject.toml").is_file():
        raise ConfigError(f"program.fn {ref!r}: a sandboxed fn needs its package's pyproject.toml {rule}")
    return project, bool(spec.submodule_search_locations)


def _project_files(project: Path) -> list[Path]:
    """The files a sandboxed fn's project uploads, sorted: not `__pycache__`, and nothing under the sandboxes' own folder."""
    sandboxes, files = sandbox_root().resolve(), []
    for folder, subfolders, names in os.walk(project.resolve()):  # follows no symlink: paths stay resolved
        subfolders[:] = [name for name in subfolders if name != "__pycache__" and Path(folder, name) != sandboxes]
        files += [Path(folder, name) for name in names]
    return sorted(path for path in files if path.is_file())


def _project_digest(project: Path) -> str:
    digest, project = hashlib.sha256(), project.resolve()
    for path in _project_files(project):
        digest.update(str(path.relative_to(project)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_install_locks: dict[tuple[str, str], asyncio.Lock] = {}


async def install_package(sandbox: Sandbox, project: Path, timeout: float) -> str:
    """Upload and pip-install `project` (with its dependencies) into the sandbox, once per sandbox.

    Its build runs without network (see `v1.programs`).

    Returns:
        The sandbox folder holding the uploaded project under its own name: the import path after the
        installed packages, so a package directory imports whatever its build backend installed.

    Raises:
        SandboxError: the installation failed.
    """
    digest = await asyncio.to_thread(_project_digest, project)
    marker = f"{PACKAGE_DIR}/installed-{digest}"
    uploads = f"{sandbox.workdir}/{PACKAGE_DIR}/src/{digest}"
    lock = _install_locks.setdefault((sandbox.id, digest), asyncio.Lock())
    async with lock:
        with contextlib.suppress(FileNotFoundError):
            await sandbox.read_file(marker, 10)
            return uploads
        source = f"{uploads}/{project.name}"
        await sandbox.upload(project, source)
        await install_project(sandbox, project, source, f"{sandbox.workdir}/{PACKAGE_DIR}/python", timeout)
        await sandbox.write_file(marker, b"ok")
    return uploads


class ControlServer:
    """The host end of a sandboxed fn's state proxy: field writes, stop, tools, the result."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.result: Any = None
        self.server: asyncio.AbstractServer | None = None

    async def start(self, path: Path) -> None:
        self.path = path
        self.server = await asyncio.start_unix_server(self._serve, path=str(path))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1)
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    reply = {"result": await self.handle(json.loads(line))}
                except Exception as exc:
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(reply, default=repr).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "set":
            guard_program_write(self.state, request.get("key"), request.get("value"))
            return None
        if op == "stop":
            self.state.stop(str(request.get("condition") or "state_done"))
            return None
        if op == "tools":
            return sorted(self.state.get_tools())
        if op == "tool":
            tool = self.state.get_tools().get(request["name"])
            if tool is None:
                raise KeyError(f"no tool {request['name']!r} in this rollout")
            return await tool(**(request.get("arguments") or {}))
        if op == "result":
            self.result = request.get("value")
            return None
        raise ValueError(f"unknown control operation {op!r}")


class SandboxedFunctionProgram:
    """Runs `program.fn` in the program's sandbox; see the module docs."""

    handles_timeout = True

    def __init__(self, program: ProgramConfig) -> None:
        if not isinstance(program.fn, str):
            raise ConfigError("a sandboxed program.fn must be a 'pkg.module:function' reference, not a Python object")
        self.program = program
        self.ref = program.fn
        self.project, self.is_package = locate_package(program.fn)

    async def __call__(self, task: Task, state: State, context: RolloutContext) -> None:
        sandboxes = state.runtime.sandboxes
        assert sandboxes is not None and sandboxes.program is not None
        config = sandboxes.program
        sandbox = await sandboxes.get("program")
        uploads = await install_package(sandbox, self.project, config.install_timeout)
        bound = await resolve_bindings(self.program, task, state)
        if bound.stdin is not None:
            raise ConfigError("a sandboxed fn's stdin carries its task and state; bind large values to files instead")
        check_exec_size([], self.program.env | bound.env)
        await prepare_workspace(sandbox, self.program, bound.files)
        await run_setup(sandbox, self.program.setup, self.program.env | bound.env, config.setup_timeout)
        socket_paths = sandbox.control_socket_path(f"control-{secrets.token_hex(8)}.sock")
        if socket_paths is None:
            raise SandboxError(f"the {config.backend} sandbox backend has no control channel for sandboxed fn programs")
        control = ControlServer(state)
        await control.start(socket_paths[0])
        try:
            snapshot = {key: value for key, value in state.items() if key != "trajectory"}
            import_root = uploads if self.is_package else f"{uploads}/{self.project.name}"
            spec = {"fn": self.ref, "task": thaw(task), "state": snapshot, "model": state.get_model(), "path": import_root}
            await sandbox.write_file(f"{PACKAGE_DIR}/runner.py", RUNNER.read_bytes())
            env = self.program.env | bound.env | endpoint_env(state, sandbox) | {"V1_CONTROL_SOCKET": socket_paths[1]}
            timeout = context.timeout_seconds or config.command_timeout
            result = await sandbox.exec(
                ["python", f"{sandbox.workdir}/{PACKAGE_DIR}/runner.py"],
                env=env,
                timeout=timeout,
                stdin=json.dumps(spec, default=repr).encode(),
            )
        finally:
            await control.close()
        record_result(state, result)
        artifacts = declared_artifacts(context, self.program.artifacts)
        if artifacts:
            await collect_artifacts(state, artifacts, sandbox.read_file)
        raise_for_result(result, f"sandboxed fn {self.ref!r}")
        if isinstance(control.result, dict):
            for key, value in control.result.items():
                guard_program_write(state, key, value)


class SandboxedBaseLoop:
    """The base loop around a sandbox: program files, dirs and setup go there first, artifacts come back.

    The sandbox is created only when there is something to put in or take out (or a tool asks for it).
    """

    def __init__(self, program: ProgramConfig) -> None:
        self.program = program

    async def __call__(self, task: Task, state: State, context: RolloutContext) -> None:
        sandboxes = state.runtime.sandboxes
        config = sandboxes.program if sandboxes is not None else None
        artifacts = declared_artifacts(context, self.program.artifacts)
        needed = bool(self.program.files or self.program.dirs or self.program.setup or artifacts)
        sandbox = await sandboxes.get("program") if sandboxes is not None and config is not None and needed else None
        if sandbox is not None and config is not None:
            bound = await resolve_bindings(self.program, task, state)
            if bound.stdin is not None:
                raise ConfigError("program binding 'stdin': the base loop runs no process to read it")
            await prepare_workspace(sandbox, self.program, bound.files)
            await run_setup(sandbox, self.program.setup, self.program.env, config.setup_timeout)
        try:
            await base_loop(task, state, context)
        finally:
            if artifacts:
                read = sandbox.read_file if sandbox is not None else _read_host_file
                await collect_artifacts(state, artifacts, read)


async def _read_host_file(path: str, max_bytes: int) -> bytes:
    return await asyncio.to_thread(read_host_file, path, max_bytes)


__all__ = [
    "FRAMEWORK_FIELDS",
    "ControlServer",
    "SandboxedBaseLoop",
    "SandboxedFunctionProgram",
    "find_package",
    "guard_program_write",
    "install_package",
]
