"""Workspace files in the rollout's sandbox: `read_file`, `write_file`, `list_files`, `edit_file`.

Paths are relative to the workspace (absolute ones must lie inside it); the
sandbox refuses anything outside, symlinks included.

    [[env.harness.toolsets]]
    name = "files"
    tools = ["toolsets.files:read_file", "toolsets.files:write_file", "toolsets.files:list_files", "toolsets.files:edit_file"]
    sandbox = "program"
"""

from __future__ import annotations

from typing import Literal

import v1 as vf
from toolsets.bash import clip
from v1.sandbox import Sandbox

MAX_READ_BYTES = 1_000_000


async def read_file(path: str, sandbox: Sandbox) -> str:
    """Read a text file of the workspace.

    Args:
        path: the file's path, relative to the workspace.
    """
    data = await sandbox.read_file(path, MAX_READ_BYTES)
    return clip(data.decode("utf-8", "replace"))


async def write_file(path: str, content: str, sandbox: Sandbox) -> str:
    """Create or overwrite a file of the workspace (parent directories are created).

    Args:
        path: the file's path, relative to the workspace.
        content: the file's whole new text.
    """
    await sandbox.write_file(path, content.encode())
    return f"wrote {len(content.encode())} bytes to {path}"


async def list_files(sandbox: Sandbox, path: str = ".") -> str:
    """List a directory of the workspace (directories end with '/').

    Args:
        path: the directory, relative to the workspace.
    """
    result = await sandbox.exec(["ls", "-1Ap", "--", path], timeout=30)
    if result.exit_code != 0:
        raise vf.ToolError(result.stderr.strip() or f"cannot list {path!r}")
    return clip(result.stdout) or "(empty)"


async def edit_file(path: str, old: str, new: str, sandbox: Sandbox) -> str:
    """Replace one exact occurrence of `old` with `new` in a workspace file.

    Args:
        path: the file's path, relative to the workspace.
        old: the text to replace; it must occur exactly once.
        new: the replacement text.
    """
    text = (await sandbox.read_file(path, MAX_READ_BYTES)).decode("utf-8")
    count = text.count(old) if old else 0
    if count != 1:
        raise vf.ToolError(f"{path}: the text to replace occurs {count} times; it must occur exactly once")
    await sandbox.write_file(path, text.replace(old, new, 1).encode())
    return f"edited {path}"


def files_toolset(sandbox: vf.SandboxConfig | Literal["program"] = "program") -> vf.Toolset:
    """A toolset holding the four file tools, run in the program's sandbox (or its own `SandboxConfig`)."""
    return vf.Toolset([read_file, write_file, list_files, edit_file], sandbox=sandbox, name="files")


__all__ = ["MAX_READ_BYTES", "edit_file", "files_toolset", "list_files", "read_file", "write_file"]
