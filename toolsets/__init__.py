"""Reusable toolsets: tools that act in the rollout's sandbox (shell commands, workspace files)."""

from toolsets.bash import bash, bash_toolset
from toolsets.files import edit_file, files_toolset, list_files, read_file, write_file

__all__ = ["bash", "bash_toolset", "edit_file", "files_toolset", "list_files", "read_file", "write_file"]
