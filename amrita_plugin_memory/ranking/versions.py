"""Versions of a fact that changed: which comes first for a question.

A fact that changed ("用户住在北京" → "用户搬到了上海") is kept as two memories linked by
the writer (``supersedes`` / ``superseded_by``: active memory's extraction with
``replaces``, ``write_memory``'s ``replaces``), never guessed from words: a newer
memory on the same topic is not an update unless its writer said so (docs/retrieval.md,
"为什么没有“新值优先”这类规则"). With the link, the order is a fact: a question about
now (or naming no tense) gets the newer version right before the older; a question
about before (以前 / used to) the older right before the newer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = ["Links", "order_versions"]

Links = Mapping[str, tuple[str, str]]
"""``{memory id: (supersedes, superseded_by)}`` (``""``: no link that way)."""


def order_versions(
    ranked: Sequence[str], links: Links, tense: Literal["now", "before"] | None
) -> list[str]:
    """``ranked`` with each linked pair side by side: the newer first unless ``tense`` is
    ``"before"``. A version is pulled forward to its partner's place, never pushed back
    past unrelated memories; unlinked memories keep their order."""
    present = set(ranked)
    out: list[str] = []
    done: set[str] = set()

    def emit(memory_id: str, depth: int = 0) -> None:
        if memory_id in done or depth > len(ranked):
            return
        older, newer = links.get(memory_id, ("", ""))
        first = older if tense == "before" else newer
        if first and first in present and first not in done:
            done.add(memory_id)  # a cycle of links cannot recurse for ever
            emit(first, depth + 1)
            done.discard(memory_id)
        if memory_id not in done:
            done.add(memory_id)
            out.append(memory_id)

    for memory_id in ranked:
        emit(memory_id)
    return out
