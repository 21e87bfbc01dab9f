"""`bash`: run a shell command in the rollout's sandbox (its workspace is the working directory).

[[env.harness.toolsets]]
name = "bash"
tools = ["toolsets.bash:bash"]
sandbox = "program"          # the program's sandbox; or a [..sandbox] table of its own
"""

from __future__ import annotations

from typing import Literal

import v1 as vf
from v1.sandbox import Sandbox

TIMEOUT_S = 120.0
MAX_OUTPUT_CHARS = 16_000


def clip(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """`text`, its middle cut out when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


async def bash(command: str, sandbox: Sandbox) -> str:
    """Run a shell command in the workspace and return its exit status and output.

    Args:
        command: the command line, run by `bash -c` (`sh -c` where bash is missing).
    """
    result = await sandbox.exec(
        ["sh", "-c", 'command -v bash >/dev/null && exec bash -c "$1" || exec sh -c "$1"', "sh", command], timeout=TIMEOUT_S
    )
    status = "timed out" if result.timed_out else f"exit status {result.exit_code}"
    output = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
    return f"[{status}]\n{clip(output)}"


def bash_toolset(sandbox: vf.SandboxConfig | Literal["program"] = "program") -> vf.Toolset:
    """A toolset holding `bash`, run in the program's sandbox (or its own `SandboxConfig`)."""
    return vf.Toolset([bash], sandbox=sandbox, name="bash")


__all__ = ["MAX_OUTPUT_CHARS", "TIMEOUT_S", "bash", "bash_toolset", "clip"]
