"""The one way options reach `bwrap`: the NUL-separated file that `bwrap --args FD` reads.

Everything a command's `bwrap` runs with (its options, the host paths it binds and the paths
inside, the working directory, the environment) goes through `option_file`. A NUL ends one
element and starts the next, so an element holding one would smuggle in options of the
sender's choosing (`--bind / /host`, `--share-net`): it is refused, never stripped. Options,
paths and variable names hold no control character at all; a variable's value is data (a
multi-line prompt bound into it, say) and only a NUL is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from v1._util.sandbox_paths import control_character_problem
from v1.errors import SandboxError


def _checked_option(option: str) -> bytes:
    problem = control_character_problem(option)
    if problem is not None:
        raise SandboxError(f"a sandbox option or path {option[:120]!r} {problem}; it is refused, never cleaned")
    return option.encode() + b"\0"


def _checked_variable(name: str, value: str) -> bytes:
    problem = control_character_problem(name) or ("holds '='" if "=" in name else None) or ("is empty" if not name else None)
    if problem is not None:
        raise SandboxError(f"environment variable name {name[:80]!r} {problem}; it is refused, never cleaned")
    if "\0" in value:
        raise SandboxError(f"environment variable {name[:80]!r}: its value holds a NUL byte; it is refused, never cleaned")
    return b"--setenv\0" + name.encode() + b"\0" + value.encode() + b"\0"


def option_file(options: Sequence[str], env: Mapping[str, str]) -> bytes:
    """`options`, then `env` as `--setenv` options, as the file `bwrap --args FD` reads.

    The environment comes last and never reaches argv, so no host `ps` shows a key.

    Raises:
        SandboxError: an option, path or variable name holds a control character, a name is empty or
            holds `=`, or a value holds a NUL byte (naming which).
    """
    return b"".join(_checked_option(option) for option in options) + b"".join(
        _checked_variable(name, value) for name, value in env.items()
    )


__all__ = ["option_file"]
