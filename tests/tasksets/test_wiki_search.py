"""wiki_search: BM25 search over the local corpus as tools; the judge (the rollout's model) grades the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import v1 as vf
from toolsets.search import Corpus, default_corpus, read_page, search
from v1.testing import MockModelServer, MockRequest, Reply


def test_search_ranks_by_bm25_and_reads_pages() -> None:
    corpus = default_corpus()
    assert corpus.top("longest river in Europe", 2) == ["Volga", "Danube"]
    assert search("penicillin mould", corpus, k=1).startswith("Penicillin: Penicillin was discovered in 1928")
    assert search("qqq", corpus) == "no pages match"
    assert "Caspian Sea" in read_page("Volga", corpus)
    assert read_page("Atlantis", corpus).startswith("no page titled 'Atlantis'")
    with pytest.raises(ValueError, match="at least one page"):
        Corpus([])


def researcher(knows: bool) -> Any:
    """Searches, reads the top page, then answers with it (or gives up); as the judge, compares with the truth."""

    def reply(request: MockRequest) -> Reply:
        text = request.last_user_text
        if text.startswith("Given a question"):
            truth = text.split("Ground-truth answer:\n")[1].split("\n")[0].lower()
            response = text.split("Response:\n")[1].lower()
            return Reply.text("yes" if truth.removeprefix("the ") in response else "no")
        tools = [m for m in request.messages if m["role"] == "tool"]
        if not tools:
            return Reply.tool("search", {"query": text})
        if len(tools) == 1:
            return Reply.tool("read_page", {"title": tools[0]["content"].split(":")[0]})
        return Reply.text(tools[-1]["content"] if knows else "I could not find it.")

    return reply


@pytest.mark.parametrize("knows", [True, False])
async def test_wiki_search_judge_separates_right_and_wrong(mock: MockModelServer, knows: bool) -> None:
    mock.responder = researcher(knows)
    env = vf.load_environment("wiki_search", harness={"client": {"api_base_url": mock.url, "max_retries": 0}, "model": "m"})
    tasks = env.taskset.tasks()[:3]
    states = await asyncio.gather(*(env.harness.run(task) for task in tasks))
    for state in states:
        assert state["error"] is None
        assert state["reward"] == float(knows) and state["judge_responses"]["judge"] == ("yes" if knows else "no")
        assert len(state["trajectory"]) == 3  # search, read_page, answer: the judge's call is not a step
    assert {t["function"]["name"] for t in mock.requests[0].tools} == {"search", "read_page"}
    assert "corpus" not in str(mock.requests[0].tools)  # the bound corpus is hidden from the model
