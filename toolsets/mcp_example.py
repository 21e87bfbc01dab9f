"""An MCP-backed toolset: the small unit-conversion server shipped in `toolsets/mcp_servers/units.py`.

The server is a real MCP server (stdio) started by `v1.MCPTool` once per scope
(per rollout by default); its tools, `convert_units` and `list_units`, join the
rollout's tools like Python ones: the base loop calls them directly, and command
agents reach them through the rollout's MCP server (`V1_MCP_URL`).

[[env.harness.toolsets]]
name = "units"
tools = [{ command = "python", args = ["toolsets/mcp_servers/units.py"], name = "units" }]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import v1 as vf

SERVER = Path(__file__).parent / "mcp_servers" / "units.py"


def units_toolset(scope: Literal["rollout", "group", "global"] = "rollout") -> vf.Toolset:
    """A toolset holding the unit-conversion MCP server's tools (`convert_units`, `list_units`).

    Args:
        scope: how long one server process lives: `rollout`, `group` or `global`.
    """
    return vf.Toolset([vf.MCPTool(sys.executable, [str(SERVER)], name="units")], name="units", scope=scope)


__all__ = ["SERVER", "units_toolset"]
