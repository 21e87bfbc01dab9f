"""Benchmark the agent harnesses: install time (npm or PyPI, cold and cached) and rollouts/s at concurrency 8.

    python benchmarks/agents.py [--rollouts 16] [--concurrency 8] [--agents codex claude_code] [--cold]

For each agent, against the mock model server (in a thread of this process):

1. install: with `--cold`, into an empty temporary cache (npm's and pip's own download caches may
   still be warm: say which when you quote it), then again from the cache;
2. `--rollouts` rollouts at `--concurrency`, each a fresh local sandbox in which the real agent
   makes two model calls (a shell tool call the mock asks for, then the answer) and runs the
   command: rollouts/s and p50 seconds per rollout.

Nothing asserts on timing; the process exits non-zero if a rollout failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import v1 as vf
from harnesses import AgentHarness, ClaudeCodeHarness, CodexHarness, GeminiCliHarness, MiniSweAgentHarness, PiHarness
from harnesses.npm import CACHE_ENV
from v1.testing import MockModelServer, MockRequest, Reply

AGENTS: dict[str, tuple[type[AgentHarness], str, str, dict[str, str]]] = {
    "codex": (CodexHarness, "openai_chat_completions", "exec_command", {"cmd": "echo hi > out.txt"}),
    "claude_code": (ClaudeCodeHarness, "anthropic_messages", "Bash", {"command": "echo hi > out.txt", "description": "x"}),
    "pi": (PiHarness, "openai_chat_completions", "bash", {"command": "echo hi > out.txt"}),
    "gemini_cli": (GeminiCliHarness, "openai_chat_completions", "run_shell_command", {"command": "echo hi > out.txt"}),
    "mini_swe_agent": (MiniSweAgentHarness, "openai_chat_completions", "bash", {"command": "echo hi > out.txt"}),
}
DONE: dict[str, Reply] = {"mini_swe_agent": Reply.tool("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})}
"""How an agent ends when it is not by answering (mini-SWE-agent submits with a command)."""


def responder(tool: str, arguments: dict[str, str], done: Reply) -> Callable[[MockRequest], Reply]:
    def reply(request: MockRequest) -> Reply:
        if not request.tools:
            return Reply.text("A title")  # a side call (session titles, checks)
        if any(message.get("role") == "tool" for message in request.messages):
            return done
        return Reply.tool(tool, arguments)

    return reply


async def bench(name: str, rollouts: int, concurrency: int, cold: bool) -> bool:
    harness_class, client_type, tool, arguments = AGENTS[name]
    with MockModelServer(responder(tool, arguments, DONE.get(name, Reply.text("done")))) as mock:
        harness = harness_class(
            client=vf.ClientConfig(client_type=client_type, api_base_url=mock.url, max_retries=0),
            model="mock-model",
            timeout_seconds=300,
        )
        package = harness.agent_package()
        assert package is not None
        if cold:
            start = time.perf_counter()
            await package.install()
            print(f"{name}: install {package.spec} cold {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        await package.install()
        print(f"{name}: install cached {1000 * (time.perf_counter() - start):.2f} ms")
        limit = asyncio.Semaphore(concurrency)
        durations: list[float] = []
        failed = 0

        async def one() -> None:
            nonlocal failed
            async with limit:
                begin = time.perf_counter()
                state = await harness.run("write hi to out.txt")
                durations.append(time.perf_counter() - begin)
                if state["error"] is not None or len(state["trajectory"]) < 2:  # side calls add steps
                    failed += 1
                    print(f"  failed rollout: {state['error']} ({len(state['trajectory'])} steps)", file=sys.stderr)

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(rollouts)))
        wall = time.perf_counter() - start
    print(
        f"{name}: {rollouts} rollouts at concurrency {concurrency}: {rollouts / wall:.2f} rollouts/s, "
        f"p50 {statistics.median(durations):.1f} s per rollout, {failed} failed"
    )
    return failed == 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--agents", nargs="+", choices=sorted(AGENTS), default=sorted(AGENTS))
    parser.add_argument("--cold", action="store_true", help="install into an empty temporary cache first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="v1-agent-cache-") as cache:
        if args.cold:
            os.environ[CACHE_ENV] = cache
        results = [await bench(name, args.rollouts, args.concurrency, args.cold) for name in args.agents]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
