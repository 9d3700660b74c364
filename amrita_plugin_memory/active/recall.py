"""Active recall: the memories most relevant to a message, as a ``<MEMORIES>`` block.

One query embedding per turn, then the same ranking as ``read_memory``
(:meth:`~..storage.memory_store.MemoryStore.search`, over the partition index: about a
millisecond). Only memories whose vector is close enough to the message
(cosine similarity ≥ ``recall_min_similarity`` for a message with CJK
characters, ``recall_min_similarity_non_cjk`` for any other: the embedding
model scores Chinese pairs far higher than English ones) are shown, so an
unrelated message ("哈哈", "在吗") gets no block. In a group only what ``read_memory``
may return there: the turn's :class:`~..storage.scope.Scope` decides (by default the
speaker's memories written in that group).

Recall never holds a turn: the query embedding has its own deadline
(``recall_timeout_seconds``, about a second, far below the embedding
client's own timeout), and after repeated failures a circuit breaker skips
recall entirely until a trial call succeeds again (:mod:`..infra.breaker`):
with the embedding service down, a turn costs nothing extra.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import numpy as np
from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.records import MemoryRecord
from ..infra.breaker import CircuitBreaker
from ..prompting.blocks import memory_date, render_memories_block
from ..ranking.when import has_cjk
from ..storage.memory_store import MemoryStore
from ..storage.scope import Scope, View

__all__ = ["MemoryRecall", "cosine_similarities", "has_cjk"]

QUERY_CHARS = 500
"""A message is searched with at most this much of its text (like ``read_memory``'s query)."""


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b) / (na * nb) if na and nb else 0.0


async def cosine_similarities(
    store: MemoryStore, view: View, vector: Sequence[float], records: Sequence[MemoryRecord]
) -> dict[str, float]:
    """Cosine similarity of ``vector`` and each record's stored vector.

    The cached partition (already loaded by the search) answers without a
    database call; a record it does not hold is read by id.
    """
    query = np.asarray(vector, dtype=np.float32)
    out: dict[str, float] = {}
    try:
        entry = await store.index.snapshot(store, view.partition)
    except Exception:
        entry = None
    rows = {memory_id: row for row, memory_id in enumerate(entry.ids)} if entry is not None else {}
    for record in records:
        row = rows.get(record.id)
        if entry is not None and row is not None and entry.dim == query.shape[0]:
            out[record.id] = _cosine(entry.vector(row), query)
            continue
        stored = await store.stored_vector(view, record.id)
        if stored is not None and len(stored) == query.shape[0]:
            out[record.id] = _cosine(np.asarray(stored, dtype=np.float32), query)
    return out


class MemoryRecall:
    """Finds and renders the memories a turn's message brings to mind."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        calendar: OwnerCalendar,
        top_k: int,
        max_chars: int,
        min_similarity: float,
        min_similarity_non_cjk: float,
        timeout: float = 1.2,
    ) -> None:
        self.store = store
        self.calendar = calendar
        """The owner's calendar (the runtime's): each line's local day and weekday."""
        self.timeout = timeout
        self.breaker = CircuitBreaker(threshold=2, cooldown=10.0, max_cooldown=120.0)
        """Open after 2 failed or late query embeddings in a row: recall is skipped."""
        self.top_k = top_k
        self.max_chars = max_chars
        self.min_similarity = min_similarity
        self.min_similarity_non_cjk = min_similarity_non_cjk

    async def recall(self, scope: Scope, text: str) -> list[tuple[MemoryRecord, float]]:
        """The relevant memories of the speaker for ``text``, best first, with their similarity
        (only what ``scope``, the turn's, may show)."""
        query = text.strip()[:QUERY_CHARS]
        if not query:
            return []
        vector = await self._embed(query)
        if vector is None:
            return []
        view = scope.view("user")
        hits = await self.store.search(view, query, vector, top_k=self.top_k)
        similarity = await cosine_similarities(self.store, view, vector, hits)
        floor = self.min_similarity if has_cjk(query) else self.min_similarity_non_cjk
        return [(r, similarity[r.id]) for r in hits if similarity.get(r.id, -math.inf) >= floor]

    async def _embed(self, query: str) -> list[float] | None:
        """The query's vector, or ``None`` when the embedder is late, failing, or known to fail."""
        if not self.breaker.allow():
            return None
        try:
            async with asyncio.timeout(self.timeout):
                vector = (await self.store.embedder.embed([query], "query"))[0]
        except Exception as exc:  # TimeoutError included: the turn goes on without a block
            self.breaker.failure()
            state = "，暂停召回" if self.breaker.is_open else ""
            logger.warning(f"[Memory] 主动召回的查询嵌入失败{state}：{exc.__class__.__name__}")
            return None
        except BaseException:
            self.breaker.failure()  # cancelled: never leave a trial hanging
            raise
        self.breaker.success()
        return vector

    async def block(self, scope: Scope, text: str) -> str:
        """The ``<MEMORIES>`` block for a message (empty when nothing is relevant)."""
        found = await self.recall(scope, text)
        lines = [(memory_date(self.calendar, r), r.content) for r, _ in found]
        return render_memories_block(lines, max_chars=self.max_chars)
