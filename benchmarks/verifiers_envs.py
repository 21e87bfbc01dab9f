"""Run verifiers' published example environments on v1 through the ``verifiers`` import alias.

The environments are other people's code, read from a checkout of verifiers' ``environments/``
folder (never copied into this project). Each one runs in its own subprocess: the alias is
installed (`v1.classic.install_verifiers_alias`), ``load_environment()`` is called through
`v1.load_environment` (as ``v1 eval --compat verifiers`` does) and a two-row ``evaluate`` runs
against `v1.testing`'s mock model server. Hugging Face datasets that are not in the local cache
are replaced by a few rows of the same columns (no dataset is downloaded), and said so in the table.

    git --git-dir=<verifiers mirror> archive 9c7b82793 environments | tar -x -C /tmp/vf
    PYTHONPATH=$PWD python benchmarks/verifiers_envs.py /tmp/vf/environments

``--python`` runs each environment with another interpreter, as a new user gets it: a clean venv
with v1 and the environments' own PyPI dependencies installed (no ``PYTHONPATH``, so the
installed v1 is the one imported)::

    python -m venv /tmp/vfenv
    /tmp/vfenv/bin/pip install '.[rg]' math-verify 'dspy==3.2.1' deno gem-llm gymnasium nltk \
        'textarena==0.7.4' openai-agents openenv-core pillow
    PYTHONPATH=$PWD python benchmarks/verifiers_envs.py /tmp/vf/environments --python /tmp/vfenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
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

# Why an environment of OFFLINE cannot run without the network or an outside service after all (checked with
# each one's own PyPI dependencies installed); the table says so next to the error it gives here.
NEEDS_OUTSIDE = {
    "dspy_rlm": "dspy.RLM runs code in Deno + Pyodide, and dspy's runner.js fetches https://deno.land/std and "
    "npm:pyodide on first run (and dspy 3.4, the newest `dspy>=3.2.0`, renamed RLM's max_iterations: use dspy 3.2)",
    "gem_wordle": "GEM's WordleEnv reads NLTK's 'words' corpus, which nltk downloads from GitHub at run time "
    "(and vf.GymEnv / verifiers.envs.experimental.gym_env are verifiers classes outside seed 001)",
    "hello_rlm_v1": "verifiers' vf.RLM clones github.com/PrimeIntellect-ai/rlm-harness into a python:3.11-slim sandbox "
    "with network access and apt-get (vf.RLM / vf.RLMConfig are outside seed 001; v1's recursive LM is harnesses.rlm)",
    "openenv_echo": "its proj/.build.json names a prebuilt image in Prime's registry, run in Prime Sandboxes "
    "(seed 001: OpenEnvEnv 'runs OpenEnv projects in Prime Sandboxes'): a remote service and API key",
    "openenv_textarena": "its proj/.build.json names a prebuilt image in Prime's registry, run in Prime Sandboxes "
    "(seed 001: OpenEnvEnv 'runs OpenEnv projects in Prime Sandboxes'): a remote service and API key",
    "wordle": "TextArena's Wordle-v0 reads NLTK's 'words' and 'averaged_perceptron_tagger_eng', which nltk downloads "
    "from GitHub at run time (and verifiers.envs.integrations.textarena_env is outside seed 001)",
}

# The cause behind a failure whose error says too little (checked by hand).
CAUSES = {
    "mcp_search_env": "its mcp_server.py imports mcp.server.fastmcp, the mcp 1.x API; v1 needs mcp>=2.3, where it is "
    "mcp.server.mcpserver.MCPServer (with that one import changed, the environment runs)",
}


def mmmu_rows() -> list[dict[str, Any]]:
    """MMMU's columns: a question, four options (a Python list literal), the letter, an image."""
    from PIL import Image

    image = Image.new("RGB", (8, 8), "red")
    return [
        {"question": "What colour is the image?", "options": "['red', 'green', 'blue', 'white']", "answer": "A", "image_1": image}
    ] * 2


# A few rows per Hugging Face dataset the offline environments read, with the columns they use.
STAND_IN_ROWS: dict[str, list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]] = {
    "MMMU/MMMU": mmmu_rows,
    "PrimeIntellect/Reverse-Text-RL": [{"prompt": "hello world"}, {"prompt": "abc def"}],
    "kalomaze/alphabetic-arxiv-authors-it1": [{"names": ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"]}] * 4,
    "agentlans/wikipedia-paragraphs": [{"text": "One. Two words here. Three is last. Four more. Five now."}] * 4,
}


def answer_anything(request: Any) -> Any:
    """The mock model: a boxed, tagged answer; one call of the first offered tool before answering; dspy's fields."""
    from v1.testing import Reply

    last = request.last_message
    if "[[ ## code ## ]]" in json.dumps(request.body.get("messages")):  # dspy's field format (dspy.RLM's next step)
        return Reply.text("[[ ## reasoning ## ]]\nok\n\n[[ ## code ## ]]\nSUBMIT(answer='4')\n\n[[ ## completed ## ]]")
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
            stand_in = STAND_IN_ROWS[path]
            rows = datasets.Dataset.from_list(stand_in() if callable(stand_in) else stand_in)
            return rows if split else datasets.DatasetDict({"train": rows, "test": rows})

    datasets.load_dataset = load_dataset


def run_one(environments: Path, name: str, url: str) -> dict[str, Any]:
    """Load and evaluate one environment in this process; the outcome as a row."""
    import v1
    from v1.classic import install_verifiers_alias

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
    parser.add_argument("--python", default=None, help="the interpreter that runs the environments (default: this one)")
    args = parser.parse_args()
    if args.one:
        print("ROW " + json.dumps(run_one(args.environments, args.one, args.url)))
        return
    from v1.testing import MockModelServer

    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    if args.python:  # the venv as activated: its installed v1 (not this checkout) and its scripts on PATH
        env.pop("PYTHONPATH", None)
        env["PATH"] = f"{Path(args.python).parent}{os.pathsep}{env.get('PATH', '')}"
    python = args.python or sys.executable
    print(f"python: {python}", flush=True)
    rows: list[dict[str, Any]] = []
    with MockModelServer(answer_anything) as mock:
        for name in args.only or OFFLINE:
            asked = len(mock.requests)
            command = [python, __file__, str(args.environments), "--one", name, "--url", mock.url]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
                line = next((x for x in done.stdout.splitlines() if x.startswith("ROW ")), None)
                row: dict[str, Any] = (
                    json.loads(line[4:])
                    if line
                    else {"env": name, "runs": False, "why": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
                )
                if "STAND-IN" in done.stderr:
                    row["why"] += " [dataset stand-in rows]"
            except subprocess.TimeoutExpired:
                row = {"env": name, "runs": False, "why": f"timed out after {args.timeout:.0f} s"}
            rows.append(row)
            if name in NEEDS_OUTSIDE:  # never counted as running, even when its rollouts end without an error
                row["runs"] = False
                seen = sum("deno.land" in json.dumps(r.body) for r in mock.requests[asked:])
                row["why"] += f"; {seen} model requests showed it a deno.land error" if seen else ""
            status = "runs" if row["runs"] else "NEEDS" if name in NEEDS_OUTSIDE else "FAILS"
            cause = NEEDS_OUTSIDE.get(name) or (CAUSES.get(name) if not row["runs"] else None)
            why = f"{cause}; here: {row['why']}" if cause else row["why"]
            print(f"{row['env']:<24} {status:<6} {why}", flush=True)
    needs = sum(not r["runs"] and r["env"] in NEEDS_OUTSIDE for r in rows)
    print(f"{sum(r['runs'] for r in rows)} of {len(rows)} run; {needs} need the network or an outside service (NEEDS)")


if __name__ == "__main__":
    main()
