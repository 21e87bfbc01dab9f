"""Command programs: `{"command": ["cmd", "arg"], ...}` run as a process, locally or in a sandbox.

The process gets the rollout's endpoint and nothing of the host's environment
beyond `PATH`/`LANG`: `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`,
`ANTHROPIC_API_KEY` (the rollout's URL and secret, never the upstream key),
`V1_MODEL` and, when the rollout has visible tools, `V1_MCP_URL` (those tools as an
MCP server, the same secret as its bearer token), plus the program's `env` and `env.*` bindings;
a `stdin` binding replaces `stdin`. A value over the kernel's limit for one argument or variable
(128 KiB) is refused in one line before anything runs: large values go as files or on stdin.
Before it runs, the program's `files`, `dirs` and `files.*` bindings are written into its working
directory and its `setup` commands run (without the endpoint variables). A
timeout kills the whole process tree, and so does v1's death, SIGKILL included. The exit status and the tails of stdout
and stderr go to `state["program_result"]`; the completion is what the
trajectory shows the model said.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from v1.config import ProgramConfig
from v1.errors import ConfigError, ProgramError, SandboxError
from v1.programs._artifacts import collect_artifacts, declared_artifacts
from v1.rollout import Binding, BindingContext
from v1.sandbox import ExecResult, OutputCallback, Sandbox, Workspace, copy_into, read_bytes, run_process, write_bytes

if TYPE_CHECKING:
    from v1.rollout import RolloutContext, State, Task

HOST_REAPER = Path(__file__).with_name("_host_reaper.py")
MAX_ARG_BYTES = 131072
"""The most one argument or `NAME=value` may hold, its NUL included (Linux's `MAX_ARG_STRLEN`)."""
EXEC_HEADROOM = 65536
"""Room kept under the system's total for what v1 adds (its reaper or the sandbox's launcher)."""
TAIL_CHARS = 4000
SETUP_TIMEOUT = 300.0


class HostWorkspace:
    """A temporary directory on the host; commands run in their own process group under a reaper
    (`_host_reaper.py`) that kills all they leave behind when they end or when v1 dies."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="v1-program-"))
        self.workdir = str(self.path)

    def _relative(self, path: str) -> str:
        inside = Path(path) if Path(path).is_absolute() else self.path / path
        if ".." in inside.parts or not inside.is_relative_to(self.path):
            raise ProgramError(f"{path!r} is outside the program's working directory")
        return str(inside.relative_to(self.path))

    async def upload(self, source: Path, destination: str) -> None:
        await copy_into(source, self.path, self._relative(destination))

    async def write_file(self, destination: str, content: bytes) -> None:
        await write_bytes(self.path, self._relative(destination), content)

    async def read_file(self, path: str, max_bytes: int) -> bytes:
        return await read_bytes(self.path, self._relative(path), max_bytes)

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
        network: bool | None = None,
    ) -> ExecResult:
        argv = [sys.executable, "-I", "-S", str(HOST_REAPER), str(os.getpid()), "--", *command]
        return await run_process(
            argv, env=dict(env or {}), cwd=cwd or self.workdir, timeout=timeout, stdin=stdin, on_output=on_output
        )

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def endpoint_env(state: State, sandbox: Sandbox | None) -> dict[str, str]:
    """The variables that point SDKs at this rollout's endpoint (and nothing else)."""
    config = state.get_endpoint_config()
    url = sandbox.endpoint_url(config["base_url"]) if sandbox is not None else config["base_url"]
    env = {
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": config["api_key"],
        "ANTHROPIC_BASE_URL": url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": config["api_key"],
        "V1_MODEL": config["model"],
    }
    if state.get("tool_defs"):
        env["V1_MCP_URL"] = url.removesuffix("/v1") + "/mcp"
    return env


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class BoundValues(NamedTuple):
    """A program's bindings resolved to text for one rollout."""

    env: dict[str, str]
    files: dict[str, str]
    stdin: str | None


async def resolve_bindings(program: ProgramConfig, task: Task, state: State) -> BoundValues:
    """The `env.*`, `files.*` and `stdin` bindings resolved to text for this rollout.

    Raises:
        ConfigError: a binding key is not `env.NAME`, `files.PATH` or `stdin`.
    """
    bound = BoundValues({}, {}, None)
    context = BindingContext(task, state, None)
    for key, source in program.bindings.items():
        kind, _, name = key.partition(".")
        if key != "stdin" and (kind not in ("env", "files") or not name):
            raise ConfigError(f"program binding {key!r}: keys are 'env.NAME', 'files.PATH' or 'stdin'")
        value = _text(await Binding(key, source).resolve(context))
        if key == "stdin":
            bound = bound._replace(stdin=value)
        else:
            (bound.env if kind == "env" else bound.files)[name] = value
    return bound


def check_exec_size(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse a command line or environment the kernel would refuse (`E2BIG`), naming the value.

    Raises:
        ProgramError: an argument or variable is over `MAX_ARG_BYTES`, or all of them over the system's total.
    """
    advice = "pass a large value as a file ('files.NAME' binding) or on stdin ('stdin' binding)"
    for name, value in env.items():
        size = len(f"{name}={value}".encode()) + 1
        if size > MAX_ARG_BYTES:
            raise ProgramError(
                f"program env {name!r:.80} is {size} bytes; one variable holds at most {MAX_ARG_BYTES} bytes: {advice}"
            )
    for index, arg in enumerate(argv):
        size = len(arg.encode()) + 1
        if size > MAX_ARG_BYTES:
            raise ProgramError(
                f"program argument {index} is {size} bytes; one argument holds at most {MAX_ARG_BYTES} bytes: {advice}"
            )
    total = sum(len(text.encode()) + 9 for text in argv) + sum(len(f"{k}={v}".encode()) + 9 for k, v in env.items())
    limit = os.sysconf("SC_ARG_MAX") - EXEC_HEADROOM
    if total > limit:
        raise ProgramError(f"the program's arguments and environment are {total} bytes, over the system's {limit}: {advice}")


async def prepare_workspace(workspace: Workspace, program: ProgramConfig, files: Mapping[str, str]) -> None:
    """Write the program's files and copy its dirs into the working directory.

    Raises:
        ConfigError: a `dirs` source is not a local directory.
    """
    for destination, content in {**program.files, **files}.items():
        await workspace.write_file(destination, content.encode())
    for destination, source in program.dirs.items():
        path = await asyncio.to_thread(_local_dir, source)
        if path is None:
            raise ConfigError(f"program dirs[{destination!r}]: {source!r} is not a local directory")
        await workspace.upload(path, destination)


def _local_dir(source: str) -> Path | None:
    path = Path(source).expanduser()
    return path if path.is_dir() else None


def record_result(state: State, result: ExecResult) -> None:
    state["program_result"] = {
        "exit_code": result.exit_code,
        "stdout": result.stdout[-TAIL_CHARS:],
        "stderr": result.stderr[-TAIL_CHARS:],
        "timed_out": result.timed_out,
        "limit": result.limit,
        "duration": round(result.duration, 3),
    }


def raise_for_result(result: ExecResult, what: str) -> None:
    """Raise for a resource limit, a timeout (`TimeoutError`: the harness ends the rollout as it does
    at its own timeout) or a non-zero exit."""
    if result.limit is not None:
        raise SandboxError(f"{what} hit the sandbox's {result.limit} limit (exit status {result.exit_code})")
    if result.timed_out:
        raise TimeoutError(f"{what} ran past its timeout")
    if result.exit_code != 0:
        tail = result.stderr.strip().splitlines()[-1:] or result.stdout.strip().splitlines()[-1:]
        raise ProgramError(f"{what} exited with status {result.exit_code}" + (f": {tail[0][:500]}" if tail else ""))


async def run_setup(workspace: Workspace, commands: Sequence[str], env: Mapping[str, str], timeout: float) -> None:
    for command in commands:
        result = await workspace.exec(["sh", "-c", command], env=env, timeout=timeout)
        if not result.ok:
            reason = "timed out" if result.timed_out else f"exited with status {result.exit_code}"
            raise ProgramError(f"program setup {command!r} {reason}: {(result.stderr or result.stdout)[-500:]}")


def host_env() -> dict[str, str]:
    """The little of the host's environment a local command keeps."""
    return {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL", "TERM", "SYSTEMROOT") if key in os.environ}


class CommandProgram:
    """Runs `program.command` + `program.args` for one rollout; see the module docs."""

    handles_timeout = True

    def __init__(self, program: ProgramConfig) -> None:
        assert program.command is not None
        self.program = program

    async def __call__(self, task: Task, state: State, context: RolloutContext) -> None:
        program = self.program
        sandboxes = state.runtime.sandboxes
        config = sandboxes.program if sandboxes is not None else None
        sandbox = await sandboxes.get("program") if sandboxes is not None and config is not None else None
        host = HostWorkspace() if sandbox is None else None
        workspace: Workspace = sandbox if sandbox is not None else cast(HostWorkspace, host)
        try:
            bound = await resolve_bindings(program, task, state)
            base = host_env() | {"HOME": workspace.workdir, "TMPDIR": tempfile.gettempdir()} if host is not None else {}
            plain_env = base | program.env | bound.env
            argv, env = [*(program.command or []), *program.args], plain_env | endpoint_env(state, sandbox)
            check_exec_size(argv, env)
            await prepare_workspace(workspace, program, bound.files)
            await run_setup(workspace, program.setup, plain_env, config.setup_timeout if config else SETUP_TIMEOUT)
            timeout = context.timeout_seconds
            if timeout is None and config is not None:
                timeout = config.command_timeout
            stdin = bound.stdin if bound.stdin is not None else program.stdin
            result = await workspace.exec(argv, env=env, timeout=timeout, stdin=stdin.encode() if stdin is not None else None)
            record_result(state, result)
            artifacts = declared_artifacts(context, program.artifacts)
            if artifacts:
                await collect_artifacts(state, artifacts, workspace.read_file)
            raise_for_result(result, f"command {program.command[0]!r}" if program.command else "command")
        finally:
            if host is not None:
                await asyncio.to_thread(host.remove)


__all__ = [
    "BoundValues",
    "CommandProgram",
    "HostWorkspace",
    "check_exec_size",
    "endpoint_env",
    "host_env",
    "prepare_workspace",
    "resolve_bindings",
]
