"""Run verifiers' published example environments on v1 through the ``verifiers`` import alias.

The environments are other people's code, read from a checkout of verifiers' ``environments/``
folder (never copied into this project). Each one runs in its own subprocess: the alias is
installed (`v1.classic.install_verifiers_alias`), ``load_environment()`` is called through
`v1.load_environment` (as ``v1 eval --compat verifiers`` does) and a two-row ``evaluate`` runs
against `v1.testing`'s mock model server. Hugging Face datasets that are not in the local cache
are replaced by a few rows of the same columns (no dataset is downloaded), and said so in the table.

    git --git-dir=<verifiers mirror> archive 9c7b82793 environments | tar -x -C /tmp/vf
    PYTHONPATH=$PWD python benchmarks/verifiers_envs.py /tmp/vf/environments
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

# The published environments that need no network service, sandbox provider or API key
# besides the model (verifiers commit 9c7b82793, May 2026).
OFFLINE = [
    "alphabet_sort",
    "doublecheck",
    "dspy_rlm",
    "gem_wordle",
    "gsm8k",
    "hello_group_reward_v1",
    "hello_rlm_v1",
    "hello_subagent_v1",
    "math_group",
    "mcp_search_env",
    "mmmu",
    "nested_harness_v1",
    "openai_agents_env",
    "openenv_echo",
    "openenv_textarena",
    "reasoning_gym_env",
    "reverse_text",
    "sentence_repeater",
    "tool_test",
    "wordle",
]

# A few rows per Hugging Face dataset the offline environments read, with the columns they use.
STAND_IN_ROWS: dict[str, list[dict[str, Any]]] = {
    "PrimeIntellect/Reverse-Text-RL": [{"prompt": "hello world"}, {"prompt": "abc def"}],
    "kalomaze/alphabetic-arxiv-authors-it1": [{"names": ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"]}] * 4,
    "agentlans/wikipedia-paragraphs": [{"text": "One. Two words here. Three is last. Four more. Five now."}] * 4,
}


def answer_anything(request: Any) -> Any:
    """The mock model: a boxed, tagged answer; one call of the first offered tool before answering."""
    from v1.testing import Reply

    last = request.last_message
    if request.tools and last.get("role") != "tool":
        tool = request.tools[0]["function"]
        args = {name: "1" for name in tool.get("parameters", {}).get("properties", {})}
        return Reply.tool(tool["name"], args)
    return Reply.text("<think>ok</think>\n<answer>4</answer><reversed_text>x</reversed_text> \\boxed{4}")


def install_dataset_stand_in() -> None:
    """`datasets.load_dataset` answers from the local cache, else from `STAND_IN_ROWS` (offline: nothing downloads)."""
    import datasets

    real = datasets.load_dataset

    def load_dataset(path: str, *args: Any, split: str | None = None, **kwargs: Any) -> Any:
        try:
            return real(path, *args, split=split, **kwargs)
        except Exception:
            if path not in STAND_IN_ROWS:
                raise
            print(f"STAND-IN {path}", file=sys.stderr)
            rows = datasets.Dataset.from_list(STAND_IN_ROWS[path])
            return rows if split else datasets.DatasetDict({"train": rows, "test": rows})

    datasets.load_dataset = load_dataset


def run_one(environments: Path, name: str, url: str) -> dict[str, Any]:
    """Load and evaluate one environment in this process; the outcome as a row."""
    import v1
    from v1.classic.verifiers_alias import install_verifiers_alias

    install_verifiers_alias()
    install_dataset_stand_in()
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(here)]  # benchmarks/agents.py is not 'agents'
    sys.path.insert(0, str(environments / name))
    stage = "load"
    try:
        env = v1.load_environment(name)
        stage = "evaluate"
        client = v1.ClientConfig(api_base_url=url, max_retries=0)
        out = env.evaluate_sync(client, "mock-model", num_examples=2, rollouts_per_example=1)
        errors = [o.get("error") for o in out["outputs"] if o.get("error")]
        if errors:
            return {"env": name, "runs": False, "why": f"rollout error: {json.dumps(errors[0])[:200]}"}
        return {
            "env": name,
            "runs": True,
            "why": f"{len(out['outputs'])} rollouts, rewards {[o['reward'] for o in out['outputs']]}",
        }
    except BaseException as error:  # the table reports every failure
        last = traceback.extract_tb(error.__traceback__)[-1]
        return {
            "env": name,
            "runs": False,
            "why": f"{stage}: {type(error).__name__}: {str(error)[:160]} ({Path(last.filename).name}:{last.lineno})",
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("environments", type=Path, help="verifiers' environments/ folder at commit 9c7b82793")
    parser.add_argument("--only", nargs="*", default=None, help="environment names (default: the 20 offline ones)")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per environment")
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(run_one(args.environments, args.one, args.url)))
        return
    from v1.testing import MockModelServer

    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    rows = []
    with MockModelServer(answer_anything) as mock:
        for name in args.only or OFFLINE:
            command = [sys.executable, __file__, str(args.environments), "--one", name, "--url", mock.url]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
                line = next((x for x in done.stdout.splitlines() if x.startswith("ROW ")), None)
                row = (
                    json.loads(line[4:])
                    if line
                    else {"env": name, "runs": False, "why": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
                )
                if "STAND-IN" in done.stderr:
                    row["why"] += " [dataset stand-in rows]"
            except subprocess.TimeoutExpired:
                row = {"env": name, "runs": False, "why": f"timed out after {args.timeout:.0f} s"}
            rows.append(row)
            print(f"{row['env']:<24} {'runs' if row['runs'] else 'FAILS':<6} {row['why']}", flush=True)
    print(f"{sum(r['runs'] for r in rows)} of {len(rows)} run")


if __name__ == "__main__":
    main()
