"""The classic API's sandbox fields (seed 001's `SandboxEnv`) as a `SandboxConfig`, and its shell command.

The seed's fields name a container (`docker_image`, `start_command` keeping it
alive). On the `local` backend there is no container: commands run in
bubblewrap over the host's system, whose Python is the one v1 runs on. So the
seed's defaults (`python:3.11-slim`, `tail -f /dev/null`) mean "the host's
system" there, and any other image or start command, GPUs, `team_id` or
`advanced_configs` need a remote backend (`backend="prime"`): asking the local
backend for them is a `ConfigError` when the environment is built, not a
failure in every rollout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from v1._util.sandbox_paths import control_character_problem, inside_directory
from v1.config import SandboxConfig
from v1.errors import ConfigError
from v1.sandbox import ExecResult, Sandbox

SEED_IMAGE = "python:3.11-slim"
SEED_START_COMMAND = "tail -f /dev/null"
MAX_TIMEOUT_MINUTES = 7 * 24 * 60
MAX_OUTPUT_CHARS = 16_000
SEED_NAMES = {"command_timeout": "timeout_per_command_seconds", "env": "environment_vars", "image": "docker_image"}
LIMIT_NAMES = {"memory": "memory_gb", "disk": "disk_size_gb", "pids": "the process limit"}


def seed_sandbox_config(
    *,
    backend: str = "local",
    sandbox_name: str = "sandbox-env",
    docker_image: str = SEED_IMAGE,
    start_command: str = SEED_START_COMMAND,
    cpu_cores: float = 1,
    memory_gb: float = 2,
    disk_size_gb: float = 5,
    gpu_count: int = 0,
    timeout_minutes: float = 60,
    timeout_per_command_seconds: float = 30,
    environment_vars: Mapping[str, str] | None = None,
    team_id: str | None = None,
    advanced_configs: Mapping[str, Any] | None = None,
    labels: Sequence[str] | None = None,
) -> SandboxConfig:
    """The `SandboxConfig` for a classic sandboxed environment's fields (see the module docs).

    Raises:
        ConfigError: a field is out of range, or asks the local backend for what it cannot give.
    """
    if backend == "local":
        _check_local(docker_image, start_command, gpu_count, team_id, advanced_configs)
    if isinstance(timeout_minutes, (int, float)) and timeout_minutes > MAX_TIMEOUT_MINUTES:
        raise ConfigError(f"timeout_minutes must be at most {MAX_TIMEOUT_MINUTES} (a week), got {timeout_minutes}")
    local = backend == "local"
    fields = {
        "backend": backend,
        "image": None if local else docker_image,
        "start_command": None if local else start_command,
        "cpu_cores": cpu_cores,
        "memory_gb": memory_gb,
        "disk_size_gb": disk_size_gb,
        "gpu_count": gpu_count,
        "timeout_minutes": timeout_minutes,
        "command_timeout": timeout_per_command_seconds,
        "env": dict(environment_vars or {}),
        "team_id": team_id,
        "advanced_configs": dict(advanced_configs) if advanced_configs is not None else None,
        "labels": [f"name:{sandbox_name}", *(labels or [])],
    }
    try:
        return SandboxConfig(**fields)
    except ConfigError as exc:
        message = str(exc).splitlines()[0].removeprefix("SandboxConfig: ")
        for internal, seed in SEED_NAMES.items():
            message = message.replace(f"field '{internal}", f"field '{seed}")
        raise ConfigError(message) from None


def _check_local(docker_image: str, start_command: str, gpu_count: int, team_id: str | None, advanced_configs: object) -> None:
    if docker_image != SEED_IMAGE:
        raise ConfigError(
            f"docker_image={docker_image!r} needs a container backend: the local sandbox backend runs the host's "
            f"system (its default {SEED_IMAGE!r} stands for that); pass backend='prime' to use an image"
        )
    if start_command != SEED_START_COMMAND:
        raise ConfigError(
            f"start_command={start_command!r} needs a container backend: the local sandbox backend keeps no process "
            "running between commands; pass backend='prime'"
        )
    if isinstance(gpu_count, int) and gpu_count > 0:
        raise ConfigError(f"gpu_count={gpu_count}: the local sandbox backend has no GPUs to give; pass backend='prime'")
    for name, value in (("team_id", team_id), ("advanced_configs", advanced_configs)):
        if value is not None:
            raise ConfigError(f"{name} applies to prime sandboxes only; pass backend='prime' or leave it unset")


def clip(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """`text`, its middle cut out when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def describe_result(result: ExecResult, timeout: float) -> str:
    """A command's output as a tool answer: stdout, then stderr, then how it ended if not plainly."""
    parts = [result.stdout.rstrip("\n")] if result.stdout else []
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr.rstrip(chr(10))}")
    if result.timed_out:
        parts.append(f"[timed out after {timeout:g} s; the command was killed]")
    elif result.limit is not None:
        parts.append(f"[killed at the sandbox's {LIMIT_NAMES.get(result.limit, result.limit)} limit]")
    elif result.exit_code:
        parts.append(f"[exit status {result.exit_code}]")
    return clip("\n".join(parts)) or "(no output)"


async def run_shell(sandbox: Sandbox, command: str, timeout: float, working_dir: str | None = None) -> str:
    """Run `command` with bash (sh where bash is missing) in `sandbox`; its output as a tool answer.

    `working_dir` is the model's: it must name a folder inside the sandbox's workspace (absolute, or
    relative to it), with no control character; anything else is the tool's answer, and nothing runs.
    """
    cwd = None
    if working_dir is not None:
        cwd = inside_directory(sandbox.workdir, working_dir)
        if cwd is None:
            problem = control_character_problem(working_dir) or f"is outside the sandbox's workspace {sandbox.workdir!r}"
            return f"error: working_dir {working_dir[:120]!r} {problem}; nothing ran"
    shell = 'command -v bash >/dev/null && exec bash -c "$1" || exec sh -c "$1"'
    result = await sandbox.exec(["sh", "-c", shell, "sh", command], cwd=cwd, timeout=timeout)
    return describe_result(result, timeout)


__all__ = [
    "MAX_OUTPUT_CHARS",
    "SEED_IMAGE",
    "SEED_START_COMMAND",
    "clip",
    "describe_result",
    "run_shell",
    "seed_sandbox_config",
]
