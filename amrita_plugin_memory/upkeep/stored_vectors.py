"""Comparing a partition's stored vectors with each other (the L3 duplicate helper).

Works on what was stored, with no embedding request, so it compares memories
correctly even when the embedding client would now use another model
(``EMBED_MISMATCH_POLICY=never``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.records import MemoryRecord, where_partition

if TYPE_CHECKING:
    from ..storage.memory_store import MemoryStore

__all__ = ["nearest", "stored_vectors"]


async def stored_vectors(
    store: MemoryStore, partition: str, cap: int, *, page_size: int = 256
) -> list[tuple[MemoryRecord, list[float]]]:
    """Up to ``cap`` memories of ``partition`` with their STORED vectors, paged by id.

    Comparing memories with each other needs no embedding request, and
    compares what was stored even when the embedding client would now use
    another model (``EMBED_MISMATCH_POLICY=never``).
    """
    res = await store._run(lambda c: c.get(where=where_partition(partition), include=[]))
    ids = list(res["ids"])[: max(cap, 0)]
    out: list[tuple[MemoryRecord, list[float]]] = []
    for start in range(0, len(ids), page_size):
        page = ids[start : start + page_size]
        got = await store._run(
            lambda c, page=page: c.get(ids=page, include=["documents", "metadatas", "embeddings"])
        )
        docs = got.get("documents") or [None] * len(got["ids"])
        metas = got.get("metadatas") or [None] * len(got["ids"])
        vecs = got.get("embeddings")
        for i, memory_id in enumerate(got["ids"]):
            meta = metas[i]
            if vecs is None or meta is None or meta.get("user_id") != partition:
                continue  # deleted or moved meanwhile
            record = MemoryRecord.from_chroma(memory_id, docs[i], meta)
            out.append((record, [float(x) for x in vecs[i]]))
    return out


async def nearest(
    store: MemoryStore, partition: str, vectors: Sequence[Sequence[float]], *, top_k: int
) -> list[list[tuple[str, float]]]:
    """``(id, distance)`` of the ``top_k`` nearest memories of ``partition`` for
    each of ``vectors``, in one batched query (same distance as every search)."""
    if not vectors:
        return []
    res = await store._run(
        lambda c: c.query(
            query_embeddings=[list(v) for v in vectors],  # type: ignore[arg-type]
            n_results=top_k,
            where=where_partition(partition),
            include=["distances"],
        )
    )
    ids = res["ids"] or []
    dists = res.get("distances") or [[] for _ in ids]
    return [
        [(i, float(d)) for i, d in zip(row_ids, row_d, strict=False)]
        for row_ids, row_d in zip(ids, dists, strict=False)
    ]
