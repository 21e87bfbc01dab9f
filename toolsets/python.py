"""`python`: run a Python snippet in the rollout's sandbox and return what it printed.

Give the toolset a sandbox (``Toolset([python], sandbox=SandboxConfig(...))``, or
``sandbox="program"`` to share the program's): the code never runs on the host.
"""

from __future__ import annotations

from typing import Any

OUTPUT_CHARS = 4000
TIMEOUT_SECONDS = 30.0


async def python(code: str, sandbox: Any) -> str:
    """Run Python code and return its standard output and errors (print what you want to see).

    Args:
        code: a Python program.
    """
    result = await sandbox.exec(["python3", "-c", code], timeout=TIMEOUT_SECONDS)
    output = (result.stdout + result.stderr).strip()
    if result.timed_out:
        output += f"\n[timed out after {TIMEOUT_SECONDS:g} s]"
    return output[-OUTPUT_CHARS:] or f"[no output; exit code {result.exit_code}]"


__all__ = ["python"]
