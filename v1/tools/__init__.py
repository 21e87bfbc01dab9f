"""Tools: `Toolset`s of Python functions and MCP servers, bindings that inject values into tool
arguments, tool scopes, and `RolloutToolbox`, the one dispatcher of a rollout's tool calls."""

from v1.tools._mcp import MCPConnection, MCPTool, mcp_result_content, mcp_result_value
from v1.tools._scopes import Scope, ScopedOwner, build_object_factories
from v1.tools._tool_function import (
    ToolFunction,
    default_error_formatter,
    invalid_arguments_message,
    parse_tool_arguments,
    render_tool_result,
)
from v1.tools._toolbox import RolloutToolbox
from v1.tools._toolset import BoundTool, Toolset, check_mcp_bindings, merge_toolsets, rollout_sandbox, sandbox_setting

__all__ = [
    "BoundTool",
    "MCPConnection",
    "MCPTool",
    "RolloutToolbox",
    "Scope",
    "ScopedOwner",
    "ToolFunction",
    "Toolset",
    "build_object_factories",
    "check_mcp_bindings",
    "default_error_formatter",
    "invalid_arguments_message",
    "mcp_result_content",
    "mcp_result_value",
    "merge_toolsets",
    "parse_tool_arguments",
    "render_tool_result",
    "rollout_sandbox",
    "sandbox_setting",
]
