"""math_python: `competition_math` with a `python` tool that runs code in a sandbox (bubblewrap locally)."""

from __future__ import annotations

from typing import Any

import v1 as vf
from tasksets.competition_math import DEFAULTS as MATH_DEFAULTS

SYSTEM_PROMPT = (
    "Solve the problem. You may call the python tool to compute (print what you need to see). "
    "Put the final answer, in simplest form, in \\boxed{}."
)
SANDBOX: dict[str, Any] = {"memory_gb": 1, "disk_size_gb": 1, "timeout_minutes": 10, "scope": "rollout"}

DEFAULTS: dict[str, Any] = {
    **MATH_DEFAULTS,
    "taskset_id": "math_python",
    "system_prompt": SYSTEM_PROMPT,
    "toolsets": [{"name": "python", "tools": ["toolsets.python:python"], "sandbox": SANDBOX}],
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The math_python taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SANDBOX", "SYSTEM_PROMPT", "load_taskset"]
