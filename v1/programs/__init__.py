"""Harness programs: the base tool loop, Python callables and `fn` references, commands, sandboxed forms."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from v1.config import ProgramConfig, SandboxConfig, resolve_callable
from v1.errors import NotSupportedError
from v1.programs._base_loop import base_loop
from v1.programs._command import CommandProgram
from v1.programs._model_call import CHAT_ROUTE, COMPLETIONS_ROUTE, call_model
from v1.programs._narrowing import check_row_data, narrow_child_sandbox, narrow_program, narrow_sandbox, program_sandbox
from v1.programs._python import run_callable
from v1.programs._sandboxed import SandboxedBaseLoop, SandboxedFunctionProgram

if TYPE_CHECKING:
    from v1.rollout import RolloutContext, State, Task

Program = Callable[["Task", "State", "RolloutContext"], Awaitable[Any]]

PROCESS_FIELDS = ("args", "files", "dirs", "env", "setup", "bindings")


def resolve_program(
    spec: ProgramConfig | Callable[..., Any] | None,
    harness_sandbox: SandboxConfig | None = None,
    task_sandbox: Mapping[str, Any] | None = None,
) -> Program:
    """The program to run for a `program=` value (and the sandbox settings around it).

    Raises:
        NotSupportedError: process fields (`files`, `env`, ...) on an in-process program.
        ConfigError: for an `fn` reference that does not resolve.
    """
    if spec is None:
        return SandboxedBaseLoop(ProgramConfig())
    if not isinstance(spec, ProgramConfig):
        fn = spec
        return lambda task, state, context: run_callable(fn, task, state)
    if spec.command is not None:
        return CommandProgram(spec)
    sandbox = narrow_sandbox(program_sandbox(spec, harness_sandbox), task_sandbox)
    if spec.fn is not None and sandbox is not None:
        return SandboxedFunctionProgram(spec)
    used = [name for name in PROCESS_FIELDS if getattr(spec, name)] + (["stdin"] if spec.stdin is not None else [])
    if sandbox is None and used:
        raise NotSupportedError(f"program field(s) {used} need a process: use a command program or give the program a sandbox")
    if spec.fn is not None:
        fn = resolve_callable(spec.fn, "program.fn")
        if used:
            raise NotSupportedError(f"program field(s) {used} don't apply to an in-process fn program")
        return lambda task, state, context: run_callable(fn, task, state)
    return SandboxedBaseLoop(spec)


__all__ = [
    "CHAT_ROUTE",
    "COMPLETIONS_ROUTE",
    "CommandProgram",
    "Program",
    "SandboxedBaseLoop",
    "SandboxedFunctionProgram",
    "base_loop",
    "call_model",
    "check_row_data",
    "narrow_child_sandbox",
    "narrow_program",
    "narrow_sandbox",
    "program_sandbox",
    "resolve_program",
    "run_callable",
]
