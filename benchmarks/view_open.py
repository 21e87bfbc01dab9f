"""How fast `v1 view` opens a large eval run: 100k rollouts by default.

    python benchmarks/view_open.py [--rollouts 100000] [--keep DIR]

Writes a run folder (`metadata.json` and a `results.jsonl` of `--rollouts` tool-calling
rollouts, each line shaped like what `v1 eval` saves: prompt, completion with a tool call and
its result, a two-step trajectory, timing, usage), starts `v1 view` on it as a real process,
and times over HTTP, each the first time (cold) and again (warm):

- the runs list (read from `metadata.json`);
- opening the run: the first answer of `/api/run` (each request indexes for at most ~1 s and
  answers with what it has; the page shows it and asks again), and the time until every line is
  indexed (asking again and again, as the page does);
- the first page of rollouts, a page sorted by reward, a full-text search, an error filter;
- one rollout.

Prints the figures and the server's peak RSS. Nothing here asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


def rollout(example: int, index: int, rng: random.Random) -> dict[str, Any]:
    question = f"Which sea does river number {example} flow into? " + " ".join(
        rng.choice(["north", "south", "long", "old", "wide"]) for _ in range(12)
    )
    call = {
        "id": f"call_{example}_{index}",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query": question[:40]})},
    }
    result = " ".join(
        rng.choice(["Volga", "Danube", "Caspian", "Black", "Sea", "river", "flows", "into", "the"]) for _ in range(80)
    )
    answer = f"It flows into the {rng.choice(['Caspian', 'Black', 'North'])} Sea."
    reward = 1.0 if "Caspian" in answer else 0.0
    prompt = [{"role": "system", "content": "Answer with the encyclopedia."}, {"role": "user", "content": question}]
    completion = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": result},
        {"role": "assistant", "content": answer},
    ]
    start = 1_700_000_000.0 + example
    step = {
        "response": {"id": "x", "usage": {"prompt_tokens": 40, "completion_tokens": 9}, "message": {"finish_reason": "stop"}},
        "tokens": None,
        "reward": reward,
        "advantage": 0.0,
        "is_truncated": False,
        "trajectory_id": f"t{example}-{index}",
        "extras": {"start": start, "end": start + 0.2, "dialect": "chat_completions"},
    }
    error = {"type": "ToolError", "message": "search timed out", "where": "tool"} if rng.random() < 0.01 else None
    return {
        "example_id": example,
        "rollout_index": index,
        "prompt": prompt,
        "completion": completion,
        "answer": "The Caspian Sea",
        "reward": reward,
        "advantage": 0.0,
        "metrics": {"judge": reward},
        "timing": {"total": rng.uniform(0.2, 2.0), "model": {"duration": 0.2}, "env": {"duration": 0.01}},
        "is_completed": True,
        "stop_condition": "no_tools_called",
        "error": error,
        "token_usage": {"input_tokens": 85.0, "output_tokens": 12.0},
        "trajectory": [
            {**step, "prompt": prompt, "completion": completion[:1]},
            {**step, "prompt": prompt + completion[:2], "completion": completion[2:]},
        ],
    }


def write_run(folder: Path, count: int, per_example: int = 4) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    with (folder / "results.jsonl").open("w") as results:
        for n in range(count):
            results.write(json.dumps(rollout(n // per_example, n % per_example, rng)) + "\n")
    metadata = {
        "env_id": "bench",
        "model": "mock",
        "num_examples": count // per_example,
        "rollouts_per_example": per_example,
        "num_rollouts": count,
    }
    (folder / "metadata.json").write_text(json.dumps(metadata))
    return (folder / "results.jsonl").stat().st_size


def timed(url: str) -> tuple[float, Any]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as response:
        data = json.loads(response.read())
    return time.perf_counter() - start, data


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, default=None, help="write the run here and keep it (default: a temporary folder)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="v1-view-bench-"))
    run = base / "bench-run"
    start = time.perf_counter()
    size = write_run(run, args.rollouts)
    print(f"wrote {args.rollouts} rollouts, {size / 2**20:.0f} MiB, in {time.perf_counter() - start:.1f} s: {run}")
    server = subprocess.Popen(
        [sys.executable, "-m", "v1.cli", "view", str(run), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        rid = urllib.parse.quote("0")
        cold, _ = timed(url + "/api/runs")
        print(f"{'runs list':36s} first {cold * 1000:8.0f} ms")
        start = time.perf_counter()
        first, detail = timed(url + f"/api/run?id={rid}")
        print(
            f"{'open the run: first answer':36s} {first * 1000:14.0f} ms  ({detail['results']['count']} rollouts indexed so far)"
        )
        while detail["results"]["indexing"]:
            _, detail = timed(url + f"/api/run?id={rid}")
        print(
            f"{'open the run: every line indexed':36s} {(time.perf_counter() - start) * 1000:14.0f} ms  ({detail['results']['count']} rollouts)"
        )
        queries = [
            ("the run's summary again", f"/api/run?id={rid}"),
            ("first page of 50", f"/api/rollouts?id={rid}&limit=50"),
            ("page sorted by reward", f"/api/rollouts?id={rid}&sort=-reward&limit=50"),
            ("errors only", f"/api/rollouts?id={rid}&error=any&limit=50"),
            ("full-text search", f"/api/rollouts?id={rid}&q=river%20number%20777%20flow&limit=50"),
            ("one rollout", f"/api/rollout?id={rid}&n={args.rollouts // 2}"),
        ]
        for label, path in queries:
            cold, data = timed(url + path)
            warm, _ = timed(url + path)
            extra = f"  ({data['total']} match)" if "total" in data else ""
            print(f"{label:36s} first {cold * 1000:8.0f} ms   again {warm * 1000:7.0f} ms{extra}")
        print(f"server peak RSS: {peak_rss_mib(server.pid):.0f} MiB")
    finally:
        server.terminate()
        server.wait(timeout=30)
        if args.keep is None:
            shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
