"""A partition's stored vectors (the L3 duplicate helper).

Works on what was stored, with no embedding request, so it compares memories
correctly even when the embedding client would now use another model
(``EMBED_MISMATCH_POLICY=never``); the batched neighbour query that compares
them is ``MemoryStore.nearest``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.records import MemoryRecord

if TYPE_CHECKING:
    from ..storage.memory_store import MemoryStore, View

__all__ = ["stored_vectors"]


async def stored_vectors(
    store: MemoryStore, view: View, cap: int, *, page_size: int = 256
) -> list[tuple[MemoryRecord, list[float]]]:
    """Up to ``cap`` memories ``view`` shows, with their STORED vectors, paged by id."""
    ids = (await store.ids(view))[: max(cap, 0)]
    out: list[tuple[MemoryRecord, list[float]]] = []
    for start in range(0, len(ids), page_size):
        for row in await store.fetch(view, ids[start : start + page_size], vectors=True):
            if row.vector is not None:  # deleted or moved meanwhile: left out by fetch
                out.append((row.record, row.vector))
    return out
