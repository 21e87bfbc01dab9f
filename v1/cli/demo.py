"""`v1 demo`: a taskset run through a harness against the built-in mock model server.

Works offline on any machine: the "model" is `v1.testing.MockModelServer`
with a scripted policy that reverses text, imperfectly for some inputs, so
the rewards differ and the group advantages mean something.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

import v1 as vf
from v1.testing import MockModelServer, MockRequest, Reply


def imperfect_reverser() -> Callable[[MockRequest], Reply]:
    """A scripted policy: reverses the text, but slips (drops or swaps characters) 40% of the time.

    Seeded, so a run is reproducible; rollouts of one task differ, so group advantages are not all 0.
    """
    rng = random.Random(1234)

    def reply(request: MockRequest) -> Reply:
        text = request.last_user_text[::-1]
        if len(text) > 2 and rng.random() < 0.4:
            i = rng.randrange(len(text) - 1)
            text = text[:i] + text[i + 1] + text[i] + text[i + 2 :] if rng.random() < 0.5 else text[:i] + text[i + 1 :]
        return Reply.text(text)

    return reply


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("demo", help="run the reverse_text taskset against the built-in mock model (offline)")
    parser.add_argument("-n", "--num-examples", type=int, default=6, help="tasks to run (default 6)")
    parser.add_argument("-r", "--rollouts", type=int, default=2, help="rollouts per task, scored as a group (default 2)")
    parser.add_argument("--json", action="store_true", help="print the scored states as JSON lines instead of a table")
    parser.set_defaults(run=run)


async def run_demo(num_examples: int, rollouts: int) -> list[vf.State]:
    from tasksets.reverse_text import load_taskset

    taskset = load_taskset()
    with MockModelServer(imperfect_reverser(), model="mock-reverser") as mock:
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
    return [state for group in results for state in group]


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
        table.add_column(column, justify="right" if column in ("id", "reward", "adv", "tok", "ms") else "left", overflow="fold")
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
