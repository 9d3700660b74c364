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

Without a vector (``EMBEDDING_ENABLED=false``, the embedding service down or late) recall
answers by keywords (:meth:`~..storage.memory_store.MemoryStore.keyword_matches`): a memory
is shown when it holds at least :data:`KEYWORD_FLOOR` of the message's keyword weight and
shares at least :data:`KEYWORD_MIN_TERMS` terms with it. With embeddings disabled the
embedder is never called.

Recall never holds a turn: the query embedding has its own deadline
(``recall_timeout_seconds``, about a second, far below the embedding
client's own timeout), and after repeated failures a circuit breaker skips
the query embedding (recall answers by keywords) until a trial call succeeds again
(:mod:`..infra.breaker`): with the embedding service down, a turn costs nothing extra.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.records import MemoryRecord
from ..infra.breaker import CircuitBreaker
from ..prompting.blocks import memory_date, render_memories_block
from ..ranking.keywords import keyword_terms
from ..ranking.when import has_cjk
from ..storage.memory_store import MemoryStore
from ..storage.scope import Scope, View

__all__ = [
    "ANCHORS",
    "KEYWORD_FLOOR",
    "KEYWORD_MIN_TERMS",
    "PERIOD_RELIEF",
    "MemoryRecall",
    "cosine_similarities",
    "has_cjk",
    "keyword_passes",
    "passing",
]

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


KEYWORD_FLOOR = 0.3
"""Without a vector, a memory is recalled when it holds at least this share of the
message's keyword weight (CJK terms at full weight) and shares :data:`KEYWORD_MIN_TERMS`
keyword terms with it. Measured by ``bench.active_keywords`` (embeddings disabled, the
best 3 memories looked at; the pair with the largest "evidence passes − unrelated
messages with a block" on the dev splits): MemoryBank-CN dev users 1–4 / held-out 5–8:
the evidence memory passes for 45.5 % / 56.5 % of questions, another user's questions
get a block 20.0 % / 24.0 %, chat lines ("在吗", "哈哈哈哈", …) 0 % / 1.3 %; LoCoMo dev
conversations 1–3 / held-out 4–5: 57.2 % / 58.1 %, 5.0 % / 9.6 %, 0 % / 0 %."""

KEYWORD_MIN_TERMS = 3
"""Keyword terms (words, numbers, CJK bigrams) a memory must share with the message to be
recalled without a vector. The share alone does not separate: it counts only the terms
found in the partition, so "哈哈哈哈" holds all of its weight in any memory with "哈哈"
(measured: with one term, no floor keeps chat lines below 29 % blocked on MemoryBank-CN's
dev users, nor another person's questions below 45 %)."""


def keyword_passes(query: str, content: str, share: float, *, floor: float, terms: int) -> bool:
    """Whether a memory (``content``, holding ``share`` of ``query``'s keyword weight) is
    close enough to the message to be recalled by keywords."""
    if share < floor:
        return False
    return len(set(keyword_terms(query)) & set(keyword_terms(content))) >= terms


PERIOD_RELIEF = 0.05
"""A memory of the period a message names ("上周我说想去哪来着") passes at its floor less
this: the period itself says which memories the message is about, and a bare period
question ("上周我说过什么") scores every memory a little lower than a topical one."""

ANCHORS: dict[bool, tuple[str, ...]] = {
    True: (
        "用户说今天天气不错",
        "用户提到了一件事",
        "用户喜欢一些东西",
        "用户最近比较忙",
        "用户和朋友聊了聊天",
        "用户有一个计划",
        "用户说了一句话",
        "用户在家休息",
    ),
    False: (
        "The user said the weather is nice today",
        "The user mentioned something",
        "The user likes some things",
        "The user has been busy lately",
        "The user chatted with a friend",
        "The user has a plan",
        "The user said something",
        "The user is resting at home",
    ),
}
"""Plain memories about nothing in particular, per script (CJK or not): how close a message
comes to *any* memory of that script. Across scripts e5 scores every pair alike (an
English "hello" is as close to a Chinese memory as "what is my cat called" to the
wrong one), so a cross-script memory is shown only when it stands out from these."""


def passing(
    query: str,
    scored: Sequence[tuple[MemoryRecord, float]],
    *,
    floor: float,
    lift: float,
    baselines: Mapping[bool, float],
    of_period: Callable[[MemoryRecord], bool],
) -> list[tuple[MemoryRecord, float]]:
    """The hits close enough to the message to be shown, in the ranking's order.

    A memory in the message's script: at least the message's ``floor``. A memory in the
    other script (an English question, a Chinese memory): at least ``lift`` above the
    message's similarity to plain memories of that script (``baselines``; none known:
    not shown). A memory of the period the message names: :data:`PERIOD_RELIEF` less.
    """
    script = has_cjk(query)
    out: list[tuple[MemoryRecord, float]] = []
    for record, similarity in scored:
        relief = PERIOD_RELIEF if of_period(record) else 0.0
        other = has_cjk(record.content)
        if other == script:
            shown = similarity >= floor - relief
        else:
            base = baselines.get(other)
            shown = base is not None and similarity - base >= lift - relief
        if shown:
            out.append((record, similarity))
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
        cross_script_lift: float = 0.045,
        timeout: float = 1.2,
        keyword_floor: float = KEYWORD_FLOOR,
        keyword_min_terms: int = KEYWORD_MIN_TERMS,
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
        self.cross_script_lift = cross_script_lift
        self.keyword_floor = keyword_floor
        """Without a vector: the share of the message's keyword weight a memory must hold."""
        self.keyword_min_terms = keyword_min_terms
        """Without a vector: the keyword terms a memory must share with the message."""
        self._anchors: dict[bool, np.ndarray] = {}
        """Each script's :data:`ANCHORS`, embedded once (with the query's model)."""

    async def recall(self, scope: Scope, text: str) -> list[tuple[MemoryRecord, float]]:
        """The relevant memories of the speaker for ``text``, best first, with their similarity
        (only what ``scope``, the turn's, may show)."""
        query = text.strip()[:QUERY_CHARS]
        if not query:
            return []
        view = scope.view("user")
        # Embeddings off or known to fail (the store's breaker): no call, no wait.
        vector = await self._embed(query) if self.store.vectors.available else None
        if vector is not None and len(vector) != (
            await self.store.stored_dimension() or len(vector)
        ):
            vector = None  # pending placeholders only, or another model: keywords answer
        if vector is None:
            return await self._by_keywords(view, query)
        hits = await self.store.search(view, query, vector, top_k=self.top_k)
        similarity = await cosine_similarities(self.store, view, vector, hits)
        if any(r.pending for r in hits):  # no vector yet: judged by its keywords
            similarity.update(await self._keyword_scores(view, query, hits))
        script = has_cjk(query)
        crossing = any(has_cjk(r.content) != script for r in hits)
        return passing(
            query,
            [(r, similarity.get(r.id, -math.inf)) for r in hits],
            floor=self.min_similarity if script else self.min_similarity_non_cjk,
            lift=self.cross_script_lift,
            baselines=await self._baselines(vector, not script) if crossing else {},
            of_period=self.store.period_test(query),
        )

    async def _by_keywords(self, view: View, query: str) -> list[tuple[MemoryRecord, float]]:
        """Recall without a vector: the memories that pass :func:`keyword_passes`, best
        first, with their share of the message's keyword weight."""
        hits = await self.store.keyword_matches(view, query, top_k=self.top_k)
        return [(r, share) for r, share in hits if self._passes(query, r, share)]

    def _passes(self, query: str, record: MemoryRecord, share: float) -> bool:
        return keyword_passes(
            query, record.content, share, floor=self.keyword_floor, terms=self.keyword_min_terms
        )

    async def _keyword_scores(
        self, view: View, query: str, hits: Sequence[MemoryRecord]
    ) -> dict[str, float]:
        """For the pending ``hits`` (a placeholder vector: its cosine means nothing): a
        passing score (1.0) when its keywords pass :func:`keyword_passes`, else ``-inf``."""
        shares = dict(
            (r.id, share)
            for r, share in await self.store.keyword_matches(view, query, top_k=self.top_k * 4)
        )
        return {
            r.id: 1.0 if self._passes(query, r, shares.get(r.id, 0.0)) else -math.inf
            for r in hits
            if r.pending
        }

    async def _baselines(self, vector: Sequence[float], script: bool) -> dict[bool, float]:
        """The query's mean similarity to the plain memories of ``script`` (``{}`` when they
        cannot be embedded now: cross-script memories are then not shown this turn)."""
        anchors = self._anchors.get(script)
        query = np.asarray(vector, dtype=np.float32)
        if anchors is None or anchors.shape[1] != query.shape[0]:
            if not self.breaker.allow():
                return {}
            try:
                async with asyncio.timeout(self.timeout):
                    rows = await self.store.embedder.embed(list(ANCHORS[script]), "document")
            except Exception as exc:  # the turn goes on; recall in the message's script stays
                logger.warning(f"[Memory] 主动召回的跨语言基准嵌入失败：{exc.__class__.__name__}")
                return {}
            anchors = np.asarray(rows, dtype=np.float32)
            anchors /= np.maximum(np.linalg.norm(anchors, axis=1, keepdims=True), 1e-12)
            self._anchors[script] = anchors
        norm = float(np.linalg.norm(query)) or 1.0
        return {script: float((anchors @ query).mean() / norm)}

    async def _embed(self, query: str) -> list[float] | None:
        """The query's vector, or ``None`` when the embedder is late, failing, or known to fail."""
        if not self.breaker.allow():
            return None
        try:
            async with asyncio.timeout(self.timeout):
                vector = (await self.store.embedder.embed([query], "query"))[0]
        except Exception as exc:  # TimeoutError included: the turn goes on without a block
            self.breaker.failure()
            state = "，暂停查询嵌入、按关键词召回" if self.breaker.is_open else ""
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
