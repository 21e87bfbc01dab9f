"""`v1 demo`: a taskset run through a harness against the built-in mock model server.

Works offline on any machine: the "model" is `v1.testing.MockModelServer`
with a scripted policy that reverses text, imperfectly for some inputs, so
the rewards differ and the group advantages mean something. The policy is
deterministic per prompt, so the demo prints the same table on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from rich.console import Console, JustifyMethod
from rich.table import Table

import v1 as vf  # its names load on first use: `v1 --help` never loads the mock server


def count(text: str) -> int:
    """A whole number of at least 1 (for `-n` and `-r`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("demo", help="run the reverse_text taskset against the built-in mock model (offline)")
    parser.add_argument("-n", "--num-examples", type=count, default=6, help="tasks to run (default 6)")
    parser.add_argument("-r", "--rollouts", type=count, default=2, help="rollouts per task, scored as a group (default 2)")
    parser.add_argument("--json", action="store_true", help="print the scored states as JSON lines instead of a table")
    parser.set_defaults(run=run)


async def run_demo(num_examples: int, rollouts: int) -> list[vf.State]:
    from tasksets.reverse_text import load_taskset

    taskset = load_taskset()
    with vf.testing.MockModelServer(vf.testing.imperfect_reverser(), model="mock-reverser") as mock:
        harness = vf.Harness(
            client=vf.ClientConfig(api_base_url=mock.url, max_retries=0),
            model="mock-reverser",
            max_turns=1,
            taskset=taskset,
        )
        groups = []
        for task in taskset.tasks()[:num_examples]:
            tasks, states = await taskset.init_group(task, rollouts)
            groups.append(harness.run_group(tasks, states))
        results = await asyncio.gather(*groups)
    # Rollouts of a group run concurrently: rows are shown best first, so the table is the same on every run.
    return [state for group in results for state in sorted(group, key=lambda s: (-s["reward"], str(s["completion"])))]


def run(args: argparse.Namespace) -> int:
    console = Console()
    start = time.perf_counter()
    states = asyncio.run(run_demo(args.num_examples, args.rollouts))
    elapsed = time.perf_counter() - start
    if args.json:
        for state in states:
            print(json.dumps(state))
        return 0
    table = Table(title=f"v1 demo: reverse_text x mock-reverser, {len(states)} rollouts")
    for column in ("id", "prompt", "completion", "reward", "adv", "stop", "tok", "ms"):
        justify: JustifyMethod = "right" if column in ("id", "reward", "adv", "tok", "ms") else "left"
        # A fixed width for the timing column, so the table's layout is the same on every run.
        table.add_column(column, justify=justify, overflow="fold", min_width=5 if column == "ms" else None)
    for state in states:
        completion = state["completion"][-1]["content"] if state["completion"] else ""
        usage = state.get("token_usage") or {}
        table.add_row(
            str(state.get("example_id")),
            state["prompt"][-1]["content"],
            completion,
            f"{state['reward']:.2f}",
            f"{state['advantage']:+.2f}",
            state["stop_condition"] + (f" ({state['error']['type']})" if state["error"] else ""),
            f"{usage.get('input_tokens', 0) + usage.get('output_tokens', 0):.0f}",
            f"{state['timing']['total'] * 1000:.0f}",
        )
    console.print(table)
    rewards = [state["reward"] for state in states]
    errors = sum(1 for state in states if state["error"])
    console.print(
        f"mean reward {sum(rewards) / len(rewards):.3f} · exact {sum(s['metrics']['exact'] for s in states) / len(states):.0%}"
        f" · errors {errors} · {len(states) / elapsed:.1f} rollouts/s"
    )
    return 1 if errors else 0


__all__ = ["add_parser", "count", "run"]
