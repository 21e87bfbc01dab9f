"""The trainer: RL (GRPO-family losses) and SFT on the token trajectories that rollouts record.

Importing `v1` never imports this package (it needs the ``[train]`` extra: torch, transformers).
"""

__all__: list[str] = []
