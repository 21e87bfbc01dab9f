"""The names and bound of a rollout's token budgets, shared by the harness config, the task row and the endpoint."""

from __future__ import annotations

TOKEN_BUDGETS = ("max_input_tokens", "max_output_tokens", "max_total_tokens")
"""The token budgets of a rollout: harness fields a task row may lower (or set where the harness has none)."""
MAX_TOKEN_BUDGET = 2**31 - 1
"""The largest token budget a harness or a row takes (a larger one is a mistake, not a limit)."""

__all__ = ["MAX_TOKEN_BUDGET", "TOKEN_BUDGETS"]
