"""Deprecated: import `print_prompt_completions_sample` from `v1` (its implementation is `v1._sample_view`)."""

from __future__ import annotations

from v1._deprecation import warn_moved
from v1._sample_view import print_prompt_completions_sample

warn_moved("v1.sample_view", "v1.print_prompt_completions_sample")

__all__ = ["print_prompt_completions_sample"]
