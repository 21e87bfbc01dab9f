"""Reusable toolsets: tools that act in the rollout's sandbox (shell commands, workspace files), an MCP-backed example."""

from toolsets.bash import bash, bash_toolset
from toolsets.files import edit_file, files_toolset, list_files, read_file, write_file
from toolsets.mcp_example import units_toolset

__all__ = ["bash", "bash_toolset", "edit_file", "files_toolset", "list_files", "read_file", "units_toolset", "write_file"]
