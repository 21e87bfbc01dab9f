"""Two commits' rollouts timed interleaved against one mock: a regression told apart from a slower machine.

    python benchmarks/compare_commits.py A B [--rounds 5] [--n 1000] [--concurrency 256] [--tool-loop] [--profile] [--json out.json]
    python benchmarks/compare_commits.py 8f7056d HEAD --profile

Checks out commits A and B as detached git worktrees in a temporary folder (removed at the end)
and starts one mock model server (`python -m v1.testing`, this checkout's, pinned to a CPU of its
own as in `rollouts.py`). Then, `--rounds` times, A and then B: a fresh process runs
`commit_driver.py` with that commit's worktree first on PYTHONPATH, which times `--n` rollouts at
`--concurrency` (single-turn, or with `--tool-loop` two model calls and a Python tool a rollout)
and reports rollouts/s and the CPU ms per rollout of its own process. Machine drift hits both
commits alike; the medians over rounds and B / A are printed, then each round.

`--profile` then runs each commit once more under cProfile and prints the CPU per rollout by
part of the stack (grouped as `profile_rollouts.py` groups it) for A and B side by side: where a
rollout's CPU moved between the two. cProfile roughly doubles times: compare shares and the
change, not the absolute figures with the rounds'. `--instructions` then runs each commit once
more under callgrind and prints the instructions per rollout (`instructions.py`), a figure CPU
steal and load do not move. Nothing asserts on timing; the process exits non-zero if a rollout
failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from instructions import CountError, check_valgrind, count
from profile_rollouts import cpu_by_part
from rollouts import env_with_path_first, mock_server_process

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "commit_driver.py"
FIGURES = (("rollouts_per_s", "rollouts/s", ".1f"), ("cpu_ms_per_rollout", "CPU ms/rollout", ".3f"))


class CommitError(Exception):
    """A commit that can't be checked out; its message is one line for the user."""


class DriverError(Exception):
    """A driver process that failed or measured the wrong code."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise CommitError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def resolve(repo: Path, commit: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except CommitError:
        raise CommitError(f"{commit!r} is not a commit of {repo}") from None


@contextmanager
def worktrees(repo: Path, commits: dict[str, str]) -> Iterator[dict[str, Path]]:
    """A detached worktree per label (label -> commit), in a temporary folder; all removed on exit."""
    with tempfile.TemporaryDirectory(prefix="compare-commits-") as folder:
        made: dict[str, Path] = {}
        try:
            for label, commit in commits.items():
                path = Path(folder) / label
                git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
                made[label] = path
            yield made
        finally:
            for path in made.values():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True)
            subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def drive(worktree: Path, url: str, args: argparse.Namespace, profile: Path | None = None) -> dict[str, Any]:
    """One fresh process running `commit_driver.py` on `worktree`'s v1; its figures."""
    command = [sys.executable, str(DRIVER), "--url", url, "--n", str(args.n), "--concurrency", str(args.concurrency)]
    if args.tool_loop:
        command.append("--tool-loop")
    if profile is not None:
        command += ["--profile", str(profile)]
    done = subprocess.run(command, env=env_with_path_first(worktree), capture_output=True, text=True, cwd=worktree)
    if done.returncode != 0:
        raise DriverError(f"the driver failed on {worktree.name}: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(figures["v1_file"]).resolve().is_relative_to(worktree.resolve()):
        raise DriverError(f"the driver imported v1 from {figures['v1_file']}, not from the worktree {worktree}")
    return figures


def profiles(worktrees_by_label: dict[str, Path], url: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Each commit once under cProfile: CPU ms per rollout by part of the stack."""
    by_label: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="compare-commits-profile-") as folder:
        for label, worktree in worktrees_by_label.items():
            print(f"profiling {label} ...", file=sys.stderr, flush=True)
            dump = Path(folder) / f"{label}.prof"
            if drive(worktree, url, args, profile=dump)["errors"]:
                raise DriverError(f"rollouts failed in the profiled run of {label}")
            parts = cpu_by_part(pstats.Stats(str(dump)))
            by_label[label] = {part: 1000 * seconds / args.n for part, seconds in parts.items()}
    return by_label


def instructions(worktrees_by_label: dict[str, Path], url: str, args: argparse.Namespace) -> dict[str, float]:
    """Each commit once under callgrind: millions of instructions per rollout."""
    driver = [str(DRIVER), "--tool-loop"] if args.tool_loop else [str(DRIVER)]
    by_label: dict[str, float] = {}
    for label, worktree in worktrees_by_label.items():
        print(f"counting {label}'s instructions ...", file=sys.stderr, flush=True)
        figures = count(driver, url, args.n, args.concurrency, worktree)
        if not Path(figures["v1_file"]).resolve().is_relative_to(worktree.resolve()):
            raise DriverError(f"the driver imported v1 from {figures['v1_file']}, not from the worktree {worktree}")
        by_label[label] = figures["instructions_per_unit"] / 1e6
    return by_label


# -- report -----------------------------------------------------------------------------------


def print_rounds(labels: dict[str, str], rounds: list[dict[str, dict[str, Any]]], summary: dict[str, dict[str, float]]) -> None:
    a, b = labels
    print(f"{'figure':<16}{'commit':<10}{'median':>10}" + "".join(f"{'round ' + str(i + 1):>10}" for i in range(len(rounds))))
    for key, name, fmt in FIGURES:
        for label in (a, b):
            cells = "".join(f"{one[label][key]:>10{fmt}}" for one in rounds)
            print(f"{name:<16}{labels[label]:<10}{summary[label][key]:>10{fmt}}{cells}")
        print(f"{'':<16}{'B / A':<10}{summary[b][key] / summary[a][key]:>10.3f}")


def print_profiles(labels: dict[str, str], by_label: dict[str, dict[str, float]]) -> None:
    a, b = labels
    totals = {label: sum(parts.values()) for label, parts in by_label.items()}
    print()
    print("CPU per rollout by part of the stack, under cProfile (ms; share of the commit's total)")
    head = f"{'part':<32}{labels[a]:>18}{labels[b]:>18}{'B - A (ms)':>12}"
    print(head)
    names = sorted(set(by_label[a]) | set(by_label[b]), key=lambda part: -by_label[a].get(part, 0.0))
    for part in [*names, "total"]:
        ms_a = totals[a] if part == "total" else by_label[a].get(part, 0.0)
        ms_b = totals[b] if part == "total" else by_label[b].get(part, 0.0)
        cell_a = f"{ms_a:.3f} {ms_a / totals[a]:6.1%}"
        cell_b = f"{ms_b:.3f} {ms_b / totals[b]:6.1%}"
        print(f"{part:<32}{cell_a:>18}{cell_b:>18}{ms_b - ms_a:>+12.3f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", metavar="A", help="the first commit (e.g. 8f7056d)")
    parser.add_argument("b", metavar="B", help="the second commit (e.g. HEAD)")
    parser.add_argument("--rounds", type=int, default=5, help="A then B, this many times (default 5)")
    parser.add_argument("--n", type=int, default=1000, help="rollouts a run (default 1000)")
    parser.add_argument("--concurrency", type=int, default=256, help="rollouts in flight at once (default 256)")
    parser.add_argument("--tool-loop", action="store_true", help="two model calls and a Python tool a rollout")
    parser.add_argument("--profile", action="store_true", help="then each commit once under cProfile, by part of the stack")
    parser.add_argument(
        "--instructions", action="store_true", help="then each commit once under callgrind: instructions per rollout"
    )
    parser.add_argument("--repo", type=Path, default=HERE.parent, help="the git repository (default: this checkout)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    for name in ("rounds", "n", "concurrency"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            parser.error(f"--{name} must be between 1 and 1,000,000")
    return args


def compare(args: argparse.Namespace) -> dict[str, Any]:
    commits = {"A": resolve(args.repo, args.a), "B": resolve(args.repo, args.b)}
    labels = {label: commit[:8] for label, commit in commits.items()}
    rounds: list[dict[str, dict[str, Any]]] = []
    by_part: dict[str, dict[str, float]] = {}
    counted: dict[str, float] = {}
    if args.instructions:
        check_valgrind()  # before minutes of rounds
    with (
        worktrees(args.repo, commits) as paths,
        mock_server_process(mock_args=["--reply", "tool-call"] if args.tool_loop else []) as url,
    ):
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
            rounds.append({label: drive(path, url, args) for label, path in paths.items()})
        if args.profile:
            by_part = profiles(paths, url, args)
        if args.instructions:
            counted = instructions(paths, url, args)
    summary = {label: {key: statistics.median(one[label][key] for one in rounds) for key, _, _ in FIGURES} for label in commits}
    kind = "tool-loop (2 model calls, a Python tool)" if args.tool_loop else "single-turn"
    print(
        f"{args.n} {kind} rollouts at concurrency {args.concurrency}, A = {args.a} ({labels['A']}), B = {args.b} ({labels['B']})"
    )
    print_rounds(labels, rounds, summary)
    if by_part:
        print_profiles(labels, by_part)
    if counted:
        ratio = counted["B"] / counted["A"]
        print(f"M instructions per rollout (callgrind): A {counted['A']:.3f}, B {counted['B']:.3f}, B / A {ratio:.3f}")
    return {
        "config": {"n": args.n, "concurrency": args.concurrency, "rounds": args.rounds, "tool_loop": args.tool_loop},
        "commits": {label: {"ref": ref, "commit": commits[label]} for label, ref in (("A", args.a), ("B", args.b))},
        "environment": {"python": platform.python_version(), "platform": platform.platform()},
        "median": summary,
        "rounds": rounds,
        "profile_ms_per_rollout": by_part,
        "million_instructions_per_rollout": counted,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = compare(args)
    except (CommitError, CountError) as exc:
        print(f"compare_commits.py: error: {exc}", file=sys.stderr)
        return 2
    except DriverError as exc:
        print(f"compare_commits.py: {exc}", file=sys.stderr)
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    errors = sum(one[label]["errors"] for one in report["rounds"] for label in one)
    if errors:
        print(f"{errors} rollout(s) failed", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
