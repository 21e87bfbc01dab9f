"""A rollout's program and sandbox: the harness's, narrowed by the task row.

A task row is outside data: it may narrow what the harness configured, never widen it
(docs/sandbox.md, "Outside data"). From a row:

- `program` as a name (or `program.name`) chooses one of the harness's `task_programs`: a
  harness opts in by naming the programs its rows may choose. A row never names a form
  (`command`, `fn`, `base`) itself.
- `program.args`, `stdin`, `env`, `files` and `artifacts` add data: `env` and `files` are merged
  key by key (the task wins), `args` and `artifacts` appended, `stdin` replaces. `env` sets only
  the variables the harness names in `task_env` (an allow list: `HTTP_PROXY`, `SSLKEYLOGFILE` or
  `PS4` change what a program does as surely as `PATH` does, and no deny list names them all);
  `files` need a sandbox of the rollout's own (beside a host program's code, an `openai.py` would run
  as the SDK; in a `group` or `global` sandbox, in the other rollouts' programs);
  `artifacts` are relative paths in a program's workspace. A `null` data field is absent.
- `program.sandbox`, `dirs`, `setup` and `bindings` are refused, whatever their value (`false`,
  `{}`, `null` alike).
- `sandbox` tightens the program's sandbox: limits no larger than the harness's, a `network`
  within the harness's (`narrow_network`; `network_access` only false), its own `labels`; any other field (`workdir` included: where the workspace is bound is
  no narrowing) must equal the harness's, checked before the row's value is parsed. On a program
  with no sandbox, it runs the program in one (the defaults, tightened).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import PurePosixPath
from typing import Any, Union

from v1._util.sandbox_paths import control_character_problem
from v1.config import NetworkPolicy, ProgramConfig, SandboxConfig
from v1.errors import ConfigError, TaskError

FORMS = ("base", "fn", "command")
DATA_FIELDS = ("args", "stdin", "env", "files", "artifacts")
MERGED = ("env", "files")
APPENDED = ("args", "artifacts")
REFUSED_PROGRAM_FIELDS = {
    "sandbox": "a row can't change the program's sandbox (use the row's 'sandbox' field to tighten it)",
    "dirs": "a row can't copy host directories into the workspace",
    "setup": "a row can't add setup commands",
    "bindings": "a row can't add bindings (put the value in the row's env, files or stdin)",
    **{form: "a row can't name a program; the harness offers programs by name in task_programs" for form in FORMS},
}
SANDBOX_LIMITS = (
    "cpu_cores",
    "memory_gb",
    "disk_size_gb",
    "gpu_count",
    "timeout_minutes",
    "command_timeout",
    "install_timeout",
    "setup_timeout",
)
SANDBOX_FREE = ("labels",)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

ProgramChoice = Union[ProgramConfig, Callable[..., Any]]
"""A program a rollout may run: a config or an in-process callable."""


def _refuse(field: str, why: str) -> TaskError:
    return TaskError(f"task field '{field}': {why}; outside data narrows what the harness configured, never widens it")


def narrow_program(
    harness_program: ProgramChoice | None,
    row: Any,
    task_programs: Mapping[str, ProgramChoice],
    task_env: Collection[str] = (),
) -> ProgramChoice | None:
    """The program of a rollout whose task row has a `program` field (see the module docs).

    `task_env`: the variables the row's `env` may set (the harness's `task_env`).

    Raises:
        TaskError: the row asks for what the harness didn't allow (naming the field).
        ConfigError: the merged program is not a valid program config.
    """
    if not row:
        return harness_program
    if isinstance(row, str):
        row = {"name": row}
    if not isinstance(row, Mapping):
        raise TaskError(f"task field 'program': expected a mapping or a program name, got {type(row).__name__}")
    for key in row:
        if key in REFUSED_PROGRAM_FIELDS:
            raise _refuse(f"program.{key}", REFUSED_PROGRAM_FIELDS[key])
        if key not in (*DATA_FIELDS, "name"):
            raise TaskError(f"task field 'program.{key}': unknown; a row may give 'name', {', '.join(DATA_FIELDS)}")
    base = _chosen(harness_program, row.get("name"), task_programs)
    data = {key: value for key, value in row.items() if key in DATA_FIELDS and value is not None}
    if not data:
        return base
    if not isinstance(base, ProgramConfig):
        raise TaskError(
            f"task field 'program.{next(iter(data))}': the harness's program runs in process and takes no program data"
        )
    _check_env(data.get("env"), task_env)
    _check_artifacts(data.get("artifacts"))
    merged: dict[str, Any] = base.model_dump(exclude_unset=True)
    for key, value in data.items():
        if key in MERGED and isinstance(value, Mapping):
            merged[key] = {**merged.get(key, {}), **value}
        elif key in APPENDED and isinstance(value, list):
            merged[key] = [*merged.get(key, []), *value]
        else:
            merged[key] = value
    try:
        return ProgramConfig.from_config(merged)
    except ConfigError as exc:
        raise ConfigError(f"task field 'program': {exc}") from None


def _chosen(harness_program: ProgramChoice | None, name: Any, task_programs: Mapping[str, ProgramChoice]) -> ProgramChoice | None:
    if name is None:
        return harness_program
    if not task_programs:
        raise _refuse("program.name", f"the harness offers no programs for rows to choose (asked for {name!r:.80})")
    if not isinstance(name, str) or name not in task_programs:
        raise TaskError(
            f"task field 'program.name': {name!r:.80} is not one of the harness's task_programs {sorted(task_programs)}"
        )
    return task_programs[name]


def _check_env(env: Any, task_env: Collection[str]) -> None:
    if not isinstance(env, Mapping):
        return  # the config's validation names the wrong type
    for name in env:
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise TaskError(f"task field 'program.env': {name!r:.80} is not a variable name")
        if name not in task_env:
            allowed = ", ".join(sorted(task_env))[:200] or "none"
            raise _refuse(f"program.env.{name}", f"not a variable the harness lets rows set (its task_env: {allowed})")


def _check_artifacts(artifacts: Any) -> None:
    if not isinstance(artifacts, list):
        return
    for i, artifact in enumerate(artifacts):
        path = artifact.get("path") if isinstance(artifact, Mapping) else artifact
        if isinstance(path, str) and (
            PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts or control_character_problem(path)
        ):
            raise _refuse(f"program.artifacts[{i}]", f"{path!r:.80} is not a relative path inside the workspace")


def check_row_data(row: Any, program: ProgramChoice | None, sandbox: SandboxConfig | None) -> None:
    """Refuse a row's program data that needs a sandbox (or a workspace) the rollout doesn't have.

    Raises:
        TaskError: `files` for a program without a sandbox, or with a sandbox other rollouts share (scope
            `group` or `global`: its files would be there when theirs run); `artifacts` for one with no workspace.
    """
    if not isinstance(row, Mapping):
        return
    if sandbox is not None:
        if row.get("files") and sandbox.scope != "rollout":
            raise _refuse(
                "program.files",
                f"the sandbox is shared (scope {sandbox.scope!r}): a row's files would be in the other rollouts' workspace",
            )
        return
    if row.get("files"):
        raise _refuse("program.files", "a row's files need a sandbox (beside a host program's code they would run as it)")
    is_command = isinstance(program, ProgramConfig) and program.command is not None
    if row.get("artifacts") and not is_command:
        raise _refuse("program.artifacts", "this program has no workspace of its own to collect a row's artifacts from")


def narrow_sandbox(base: SandboxConfig | None, row: Any) -> SandboxConfig | None:
    """The program's sandbox tightened by a task row's `sandbox` field (see the module docs).

    Raises:
        TaskError: the row raises a limit, turns network on or changes another field (naming it).
        ConfigError: the row's field is not a valid sandbox config (naming the field).
    """
    if not row:
        return base
    if not isinstance(row, Mapping):
        raise TaskError(f"task field 'sandbox': expected a mapping of sandbox fields, got {type(row).__name__}")
    current = base if base is not None else SandboxConfig()
    network_field = "sandbox.network_access" if "network_access" in row else "sandbox.network"
    try:
        row = SandboxConfig.network_spelled(dict(row))
    except ValueError as exc:
        raise TaskError(f"task field 'sandbox': {exc}") from None
    for key, value in row.items():
        if key in SandboxConfig.model_fields and key not in (*SANDBOX_FREE, *SANDBOX_LIMITS, "network"):
            if value != getattr(current, key):
                raise _refuse(f"sandbox.{key}", f"a row can't change it (the harness's: {getattr(current, key)!r:.80})")
    try:
        narrowed = SandboxConfig.from_config({**current.model_dump(exclude_unset=True), **row})
    except ConfigError as exc:
        raise ConfigError(f"task field 'sandbox': {exc}") from None
    for key in row:
        was, now = getattr(current, key), getattr(narrowed, key)
        if key in SANDBOX_FREE or now == was:
            continue
        if key in SANDBOX_LIMITS:
            if now > was:
                raise _refuse(f"sandbox.{key}", f"{now!r} is above the harness's {was!r}; a row may only lower a limit")
        elif key == "network":
            try:
                narrowed = narrowed.model_copy(update={"network": narrow_network(was, now)})
            except ValueError as exc:
                raise _refuse(network_field, str(exc)) from None
    return narrowed


def narrow_network(harness: str | NetworkPolicy, row: str | NetworkPolicy) -> str | NetworkPolicy:
    """`harness`'s network narrowed by a row's: the row's, when it is within the harness's (the harness's
    `block` entries kept). `"all"` holds everything, `"none"` nothing but itself.

    Raises:
        ValueError: the row's reaches a host the harness's doesn't (naming it).
    """
    if harness == "all" or row == "none" or (isinstance(row, NetworkPolicy) and not row.allow):
        return row
    if harness == "none" or row == "all":
        raise ValueError(f"{_describe(row)} is wider than the harness's {_describe(harness)}")
    assert isinstance(harness, NetworkPolicy) and isinstance(row, NetworkPolicy)
    outside = row.first_not_within(harness)
    if outside is not None:
        raise ValueError(f"allow entry {outside!r} is not within the harness's allow list {harness.allow!r:.200}")
    return NetworkPolicy(allow=row.allow, block=list(dict.fromkeys([*harness.block, *row.block])))


def narrow_child_sandbox(parent: SandboxConfig | None, child: SandboxConfig | None) -> SandboxConfig | None:
    """The sandbox of a rollout run from inside another's program (a child harness): its network within the
    parent rollout's sandbox's (the parent's `block` entries kept). A parent without a sandbox constrains nothing.

    Raises:
        TaskError: the child's network reaches a host the parent's doesn't.
    """
    if parent is None or child is None:
        return child
    try:
        network = narrow_network(parent.network, child.network)
    except ValueError as exc:
        why = str(exc).replace("the harness's", "its parent rollout's")
        raise TaskError(
            f"a child harness's sandbox.network: {why}; a rollout run inside another reaches no more than it"
        ) from None
    return child.model_copy(update={"network": network})


def _describe(network: str | NetworkPolicy) -> str:
    return repr(network) if isinstance(network, str) else f"allow list {network.allow!r:.200}"


def program_sandbox(program: ProgramConfig | None, harness_sandbox: SandboxConfig | None) -> SandboxConfig | None:
    """The sandbox the program runs in: its own, the harness's (`sandbox=True` or unset), or None."""
    own = program.sandbox if program is not None else None
    if isinstance(own, SandboxConfig):
        return own
    if own is True:
        return harness_sandbox or SandboxConfig()
    if own is False:
        return None
    return harness_sandbox


__all__ = ["check_row_data", "narrow_child_sandbox", "narrow_network", "narrow_program", "narrow_sandbox", "program_sandbox"]
