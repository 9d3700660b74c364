"""The knowledge base searched by keywords: no embedding model, or the service down (#47).

An entry's text is the source of truth (:mod:`.knowledge_docs`); its vector is an index
of it. Without a vector for the question (``EMBEDDING_ENABLED=false``, or an outage),
the loop's ``search_knowledge`` ranks the entries by the share of the question's keyword
weight each holds (the same keyword maths as the memories': :mod:`...ranking.keywords`).
The knowledge base is small (the loop writes it, a few hundred entries at most), so
every entry's text is read for a search; the read is bounded by :data:`MAX_ENTRIES`.
"""

from __future__ import annotations

from typing import Any

from ..ranking.keywords import KeywordIndex
from .knowledge_docs import KnowledgeDocs
from .knowledge_entry import KnowledgeEntry

__all__ = ["MAX_ENTRIES", "keyword_search"]

MAX_ENTRIES = 2_000
"""Entries read for one keyword search at most (the newest first)."""


async def keyword_search(docs: KnowledgeDocs, query: str, top_k: int) -> list[dict[str, Any]]:
    """The entries holding the most of ``query``'s keywords, best first (none: no match)."""
    index = await docs.index()
    newest = sorted(index, key=lambda kid: str(index[kid].get("updated_at", "")), reverse=True)
    entries: list[KnowledgeEntry] = []
    for kid in newest[:MAX_ENTRIES]:
        entry = await docs.load(kid)
        if entry is not None:
            entries.append(entry)
    scores = KeywordIndex([e.document for e in entries]).coverage(query)
    best = sorted(scores.items(), key=lambda item: (-item[1], entries[item[0]].kid))
    return [
        {
            "kid": entries[row].kid,
            "title": entries[row].title,
            "summary": entries[row].summary,
            "keyword_score": round(score, 4),
        }
        for row, score in best[: max(1, top_k)]
    ]
