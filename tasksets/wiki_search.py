"""wiki_search: answer questions by searching a small local encyclopedia; an LLM judge grades the answer.

The model has two tools from `toolsets.search`: `search` (BM25 over the corpus) and
`read_page`. The corpus ships in `tasksets/data/wiki_corpus.jsonl` (short hand-written
pages) and the questions in `tasksets/data/wiki_search.jsonl`. The reward is
`judge` (`v1.judge_reward`): the rollout's own model, called through the rollout's
endpoint after the program, says whether the answer matches the ground truth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import v1 as vf

DATA = Path(__file__).parent / "data" / "wiki_search.jsonl"
SYSTEM_PROMPT = (
    "Answer the question using the encyclopedia: call search to find pages and read_page to read one. "
    "When you know the answer, reply with it in one short sentence."
)


def load_rows() -> list[dict[str, Any]]:
    """Rows with `question` and `answer`."""
    with DATA.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


judge = vf.judge_reward(name="judge")
"""The judge reward (1.0 when the model, as a judge, says the answer is right)."""


TOOLSET: dict[str, Any] = {
    "name": "search",
    "tools": ["toolsets.search:search", "toolsets.search:read_page"],
    "objects": {"corpus": "toolsets.search:default_corpus"},
    "bindings": {"search.corpus": "objects.corpus", "read_page.corpus": "objects.corpus"},
    "scope": "global",
}

DEFAULTS: dict[str, Any] = {
    "taskset_id": "wiki_search",
    "source": "tasksets.wiki_search:load_rows",
    "eval_source": "tasksets.wiki_search:load_rows",
    "system_prompt": SYSTEM_PROMPT,
    "toolsets": [TOOLSET],
    "rewards": [{"fn": "tasksets.wiki_search:judge", "weight": 1.0}],
}


def load_taskset(config: vf.TasksetConfig | None = None) -> vf.Taskset:
    """The wiki_search taskset; fields set in `config` (``[env.taskset]``) override its defaults."""
    return vf.Taskset(config=vf.TasksetConfig.with_defaults(DEFAULTS, config))


__all__ = ["DEFAULTS", "SYSTEM_PROMPT", "TOOLSET", "judge", "load_rows", "load_taskset"]
