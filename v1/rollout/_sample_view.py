"""`print_prompt_completions_sample`: a few rollouts of an eval, printed as a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from v1.types import GenerateOutputs

if TYPE_CHECKING:
    from rich.console import Console


def _render(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    lines = []
    for message in messages or []:
        content = message.get("content") if isinstance(message, Mapping) else message
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
        calls = message.get("tool_calls") if isinstance(message, Mapping) else None
        suffix = f" [tool calls: {', '.join(c.get('function', c).get('name', '?') for c in calls)}]" if calls else ""
        lines.append(f"{message.get('role', '?') if isinstance(message, Mapping) else '?'}: {content or ''}{suffix}")
    return "\n".join(lines)


def print_prompt_completions_sample(
    outputs: GenerateOutputs | Sequence[Mapping[str, Any]], n: int = 3, console: Console | None = None
) -> None:
    """Print the prompt, completion and reward of the first `n` rollouts.

    Args:
        outputs: what `Env.evaluate`/`generate` returned, or a list of rollout outputs.
        n: how many rollouts to show.
        console: where to print (default: a rich console on stdout).
    """
    from rich.console import Console  # imported on use: `import v1` stays light
    from rich.table import Table

    rollouts = outputs["outputs"] if isinstance(outputs, Mapping) else outputs
    table = Table("prompt", "completion", "reward", show_lines=True)
    for rollout in list(rollouts)[: max(n, 0)]:
        reward = rollout.get("reward")
        table.add_row(
            _render(rollout.get("prompt")), _render(rollout.get("completion")), "" if reward is None else f"{reward:.3f}"
        )
    (console or Console()).print(table)


__all__ = ["print_prompt_completions_sample"]
