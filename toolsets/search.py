"""`search`: BM25 search over a small local corpus of pages, and `read_page` to open one.

A corpus is a JSONL file of ``{"title": ..., "text": ...}`` rows. The tools take a
hidden `corpus` argument; bind it to an object built once per process:

    vf.Toolset([search, read_page], objects={"corpus": "toolsets.search:default_corpus"},
               bindings={"search.corpus": "objects.corpus", "read_page.corpus": "objects.corpus"}, scope="global")
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rank_bm25 import BM25Okapi

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "tasksets" / "data" / "wiki_corpus.jsonl"
SNIPPET_CHARS = 200


def tokens(text: str) -> list[str]:
    """Lower-case word tokens (letters and digits)."""
    return re.findall(r"[a-z0-9]+", text.lower())


class Corpus:
    """Pages (`title`, `text`) indexed for BM25 ranking.

    Args:
        pages: mappings with `title` and `text`; titles must be unique.
    """

    def __init__(self, pages: Iterable[Mapping[str, Any]]) -> None:
        self.pages = {str(page["title"]): str(page["text"]) for page in pages}
        if not self.pages:
            raise ValueError("a search corpus needs at least one page")
        self.titles = list(self.pages)
        self.index = BM25Okapi([tokens(f"{title} {self.pages[title]}") for title in self.titles])

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Corpus:
        with Path(path).open(encoding="utf-8") as lines:
            return cls(json.loads(line) for line in lines if line.strip())

    def top(self, query: str, k: int) -> list[str]:
        """The titles of the `k` best pages for `query` (pages sharing no word with it are left out)."""
        query_tokens = tokens(query)
        scores = self.index.get_scores(query_tokens) if query_tokens else []
        ranked = sorted(zip(scores, self.titles), key=lambda pair: -pair[0])
        words = set(query_tokens)
        return [title for _, title in ranked if words & set(tokens(f"{title} {self.pages[title]}"))][:k]


def default_corpus() -> Corpus:
    """The bundled corpus (`tasksets/data/wiki_corpus.jsonl`)."""
    return Corpus.from_jsonl(DEFAULT_CORPUS)


def search(query: str, corpus: Corpus, k: int = 3) -> str:
    """Search the encyclopedia; returns the best-matching page titles with a snippet of each.

    Args:
        query: words to look for.
        k: how many pages to return (1-10).
    """
    titles = corpus.top(query, max(1, min(int(k), 10)))
    if not titles:
        return "no pages match"
    return "\n".join(f"{title}: {corpus.pages[title][:SNIPPET_CHARS]}" for title in titles)


def read_page(title: str, corpus: Corpus) -> str:
    """Read a whole page of the encyclopedia by its exact title.

    Args:
        title: a title returned by `search`.
    """
    if title not in corpus.pages:
        return f"no page titled {title!r}; use a title returned by search"
    return corpus.pages[title]


__all__ = ["Corpus", "default_corpus", "read_page", "search", "tokens"]
