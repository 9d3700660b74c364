"""The keyword channel of :mod:`.retrieval`: a partition's rows and their keyword matches.

Its own module because it is a channel of its own, read by two callers: the ranking
(:func:`~.retrieval.search`, beside the vector channel) and the store's keyword-only
reads (:mod:`..memory_reads`: pending memories, no question vector). It finds what a
vector model blurs (numbers, codes, names) by looking up the query's tokens in the
partition's documents (:class:`~...ranking.keywords.KeywordIndex`, cached beside the
partition's vectors in :class:`~.index.PartitionIndex`, else built from rows read from
Chroma), and keeps the filters every channel shares (importance, origins).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from ...core.records import PENDING_KEY, MemoryRecord, OriginFilter, where_partition
from ...ranking.keywords import KeywordIndex
from .index import IndexedStore, PartitionIndex

__all__ = ["INLINE_KEYWORD_ROWS", "RowStore"]

T = TypeVar("T")


class RowStore(IndexedStore, Protocol):
    """What the keyword channel needs of :class:`~..memory_store.MemoryStore`."""

    index: PartitionIndex

    async def _run(self, fn: Callable[[Any], T]) -> T: ...


_KEYWORD_KEY = "keywords"
"""Key of the keyword index in a cached partition entry's ``derived`` dict."""


def _keep(meta: Mapping[str, Any], importance: str | None, origins: OriginFilter) -> bool:
    if importance is not None and meta.get("importance") != importance:
        return False
    return origins.allows_meta(meta)


INLINE_KEYWORD_ROWS = 64
"""Partitions up to this size get their keyword index built on the event loop
(about 35 µs a memory); larger ones in a worker thread. Building it for a
10,000-memory partition takes ~0.35 s: on the loop, 50 users asking at once
stalled it for seconds."""


async def _build_keywords(store: RowStore, documents: list[str | None]) -> KeywordIndex:
    if len(documents) <= INLINE_KEYWORD_ROWS:
        return KeywordIndex(documents)
    async with store.index.heavy:  # GIL-bound work: a few at a time (see LOAD_CONCURRENCY)
        return await asyncio.to_thread(KeywordIndex, documents)


async def _keywords_of(store: RowStore, entry: Any) -> KeywordIndex:
    index = entry.derived.get(_KEYWORD_KEY)
    if index is None:
        index = await _build_keywords(store, entry.documents)
        entry.derived[_KEYWORD_KEY] = index
    return index


async def _partition_rows(
    store: RowStore, partition: str
) -> tuple[list[str], list[str | None], list[dict[str, Any]]]:
    """Every memory of ``partition`` from Chroma (when the partition index cannot answer)."""
    res = await store._run(
        lambda c: c.get(where=where_partition(partition), include=["documents", "metadatas"])
    )
    ids = list(res["ids"])
    docs: list[str | None] = list(res.get("documents") or [None] * len(ids))
    metas = [dict(m or {}) for m in (res.get("metadatas") or [None] * len(ids))]
    return ids, docs, metas


async def _snapshot(store: RowStore, partition: str) -> Any:
    """The partition's cached rows, or ``None`` (Chroma answers instead)."""
    try:
        return await store.index.snapshot(store, partition)
    except Exception:
        store.index.drop(partition)
        return None


async def _keyword_hits(
    store: RowStore,
    entry: Any,
    partition: str,
    text: str,
    vector: Sequence[float] | None,
    limit: int,
    importance: str | None,
    origins: OriginFilter,
    cjk_unit: float,
    *,
    pending_only: bool = False,
) -> list[tuple[MemoryRecord, float]]:
    """``(record, keyword part)`` of the best keyword matches: the share of the query's
    keyword weight a memory holds, CJK terms counted at ``cjk_unit`` (what the ranking
    adds). Records carry distances when the partition's vectors are cached (keyword-only
    hits are shown like the others), never a pending memory's (its vector is a
    placeholder); ``pending_only``: only pending memories."""
    if entry is not None:
        ids, docs, metas = entry.ids, entry.documents, entry.metadatas
        keywords = await _keywords_of(store, entry)
    else:
        ids, docs, metas = await _partition_rows(store, partition)
        keywords = await _build_keywords(store, docs)
    scores = keywords.coverage(text, cjk_unit=cjk_unit)
    rows = np.asarray(
        [
            r
            for r in scores
            if _keep(metas[r], importance, origins)
            and (not pending_only or metas[r].get(PENDING_KEY))
        ],
        dtype=np.int64,
    )
    query = np.asarray(vector if vector is not None else (), dtype=np.float32)
    by_score = np.asarray([-scores[r] for r in rows.tolist()], dtype=np.float64)
    distances: np.ndarray | None = None
    if entry is not None and query.shape == (entry.dim,) and len(rows):
        diff = entry.vectors[rows] - query
        distances = close = np.einsum("ij,ij->i", diff, diff)
        # Equal shares (often only a name or a common word matched): the closest first.
        order = np.lexsort((close, by_score))
    else:
        by_id = np.asarray([ids[r] for r in rows.tolist()])
        # Keywords alone: of equal shares the shorter memory first (its match says more).
        shorter = keywords.lengths[rows] if vector is None else np.zeros(len(rows))
        order = np.lexsort((by_id, shorter, by_score))
    out: list[tuple[MemoryRecord, float]] = []
    for i in order[:limit].tolist():
        r = int(rows[i])
        distance = None if distances is None else float(distances[i])
        if metas[r].get(PENDING_KEY):
            distance = None
        record = MemoryRecord.from_chroma(ids[r], docs[r], metas[r], distance)
        out.append((record, scores[r]))
    return out
