"""Harness programs: the base tool loop, Python callables and `fn` references."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from v1.config import ProgramConfig, resolve_callable
from v1.errors import NotSupportedError
from v1.programs.base_loop import base_loop
from v1.programs.python import run_callable

if TYPE_CHECKING:
    from v1.harness import RolloutContext
    from v1.state import State
    from v1.task import Task

Program = Callable[["Task", "State", "RolloutContext"], Awaitable[Any]]

UNSUPPORTED_PROGRAM_FIELDS = ("args", "files", "dirs", "env", "setup", "artifacts", "bindings")


def resolve_program(spec: ProgramConfig | Callable[..., Any] | None) -> Program:
    """The program to run for a `program=` value.

    Raises:
        NotSupportedError: for `command` programs and per-program fields not built yet.
        ConfigError: for an `fn` reference that does not resolve.
    """
    if spec is None:
        return base_loop
    if not isinstance(spec, ProgramConfig):
        fn = spec
        return lambda task, state, context: run_callable(fn, task, state)
    used = [name for name in UNSUPPORTED_PROGRAM_FIELDS if getattr(spec, name)]
    if spec.sandbox:
        used.append("sandbox")
    if spec.command is not None:
        raise NotSupportedError("program.command (command and agent-CLI programs) is not supported yet; use base or fn")
    if used:
        raise NotSupportedError(f"program field(s) {used} are not supported yet (they need command/sandbox programs)")
    if spec.fn is not None:
        fn = resolve_callable(spec.fn, "program.fn")
        return lambda task, state, context: run_callable(fn, task, state)
    return base_loop


__all__ = ["Program", "base_loop", "resolve_program", "run_callable"]
