"""Paths inside a sandbox, as configs, rows, callers and models name them.

A path inside a sandbox ends up as one element of the NUL-separated file that
`bwrap --args FD` reads (see `v1.sandbox`'s option file): a NUL in it would end
the element and start an option of the sender's choosing. So a path is refused,
never cleaned, when it holds a control character; and where it enters (a config
field, a caller's `cwd`, a model's working directory) it must be absolute and
already normalised, or (a model's) resolve inside the workspace.
"""

from __future__ import annotations

import posixpath
import re

CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")
"""NUL, the other C0 controls (newline, escape, ...) and DEL: never part of a path, an option or a variable name."""


def control_character_problem(text: str) -> str | None:
    """Why `text` can't be a path, option or name (it holds a control character), or None."""
    found = CONTROL_CHARACTER.search(text)
    if found is None:
        return None
    return f"holds a control character ({found.group()!r} at offset {found.start()})"


def sandbox_path_problem(path: str) -> str | None:
    """Why `path` is not a plain absolute path inside a sandbox, or None when it is.

    A plain path holds no control character, is absolute and is normalised: no `.` or `..`
    component, no `//`, no trailing `/` (the root `/` itself is plain).
    """
    problem = control_character_problem(path)
    if problem is not None:
        return problem
    if not path.startswith("/"):
        return "is not an absolute path"
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if path != normal:
        return f"is not normalised (no '.', '..', '//' or trailing '/'; say {normal!r})"
    return None


def inside_directory(directory: str, path: str) -> str | None:
    """`path` (absolute, or relative to the plain path `directory`) normalised, when it is `directory` or below it.

    None when it names a place outside `directory` (`..` past it, another absolute path) or holds a
    control character.
    """
    if control_character_problem(path) is not None:
        return None
    joined = "/" + posixpath.normpath(posixpath.join(directory, path)).lstrip("/")
    if joined == directory or joined.startswith(directory.rstrip("/") + "/"):
        return joined
    return None


__all__ = ["CONTROL_CHARACTER", "control_character_problem", "inside_directory", "sandbox_path_problem"]
