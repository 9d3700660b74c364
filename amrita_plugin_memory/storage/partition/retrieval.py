"""How ``read_memory`` ranks a partition: vector channel, keyword channel, age decay.

The vector channel is the store's nearest-neighbour search (the partition
index, or Chroma). The keyword channel looks up the query's tokens in the same
partition's documents (:class:`~...ranking.keywords.KeywordIndex`, cached beside the
partition's vectors in :class:`~.index.PartitionIndex`), for what a
vector model blurs: numbers, codes, names. Distances are grown by age
(:func:`~...ranking.scores.decayed_distance`), both channels are combined
(:func:`~...ranking.scores.combine`: relative vector closeness plus the share of
the query's keywords a memory holds). Nothing else reorders the result: no
word list decides which memory is "the update" or what a question is about
(issue #23: such rules put the wrong memory first on data they were not
written for). Every candidate comes from the one partition, with the same
filters, so the partition rules are those of the plain vector search.

Per language (issue #31): the query's script picks a :class:`ScriptRanking`
(:attr:`RetrievalSettings.cjk` for a query with CJK characters,
:attr:`RetrievalSettings.other` for any other). A channel that did not beat
plain cosine on a language's public yardstick (MemoryBank-CN, LoCoMo; dev
splits) is off for it: for Chinese the CJK terms of the keyword channel (ASCII
words and codes in a Chinese question still count). Age decay helped neither
language and is off by default (``[decay] enabled``).
A question that names a time (:func:`~...ranking.when.named_period`) adds the
memories written then to the candidates and gives them :attr:`~RetrievalSettings.time_weight`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from typing import Any, Protocol, TypeVar

import numpy as np

from ...core.config import ConfigFile
from ...core.records import MemoryRecord, OriginFilter, where_partition
from ...ranking.keywords import CJK_UNIT, KeywordIndex
from ...ranking.scores import age_days, combine, decay_factor, decayed_distance, parse_time
from ...ranking.when import Period, has_cjk, named_period
from .index import IndexedStore, PartitionIndex


class SearchStore(IndexedStore, Protocol):
    """What ranking needs of :class:`~..memory_store.MemoryStore` (which imports this module)."""

    index: PartitionIndex
    clock: Callable[[], str]

    async def _query_vector(
        self,
        partition: str,
        vector: Sequence[float],
        *,
        top_k: int,
        importance: str | None,
        origins: OriginFilter,
        load: bool = True,
    ) -> list[MemoryRecord]: ...

    async def _run(self, fn: Callable[[Any], T]) -> T: ...


__all__ = ["INLINE_KEYWORD_ROWS", "RetrievalSettings", "ScriptRanking", "SearchStore", "search"]

T = TypeVar("T")

_KEYWORD_KEY = "keywords"
"""Key of the keyword index in a cached partition entry's ``derived`` dict."""


@dataclass(frozen=True, slots=True)
class ScriptRanking:
    """The channels for queries of one script (decided by measurement: docs/retrieval.md)."""

    cjk_unit: float
    """Weight of a CJK term in the keyword part (a word, number or code counts 1)."""


CJK_RANKING = ScriptRanking(cjk_unit=0.0)
"""A query with CJK characters: on MemoryBank-CN's dev users the CJK terms of the
keyword channel put a wrong memory first and never a right one
(``bench.memorybank_bench --channels``); its ASCII words and codes still count."""
OTHER_RANKING = ScriptRanking(cjk_unit=CJK_UNIT)
"""Any other query: the keyword channel beats plain cosine on LoCoMo's dev
conversations (``bench.locomo_bench --channels``)."""


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """The ``[retrieval]`` and ``[decay]`` settings the store ranks and merges with."""

    hybrid: bool = True
    keyword_weight: float = 0.25
    decay: bool = False
    decay_weight: float = 0.05
    half_lives: dict[str, float] = field(
        default_factory=lambda: {"low": 7.0, "medium": 90.0, "high": 0.0}
    )
    candidates: int = 20
    dedup: bool = True
    dedup_min_cosine: float = 0.95
    cjk: ScriptRanking = CJK_RANKING
    other: ScriptRanking = OTHER_RANKING
    time_weight: float = 0.2
    """Added to the score of a memory written in the period the query names (0: off)."""

    def script(self, text: str) -> ScriptRanking:
        """The channels for the query ``text``, by its script."""
        return self.cjk if has_cjk(text) else self.other

    @classmethod
    def from_config(cls, file: ConfigFile) -> RetrievalSettings:
        return cls(
            hybrid=file.retrieval.hybrid,
            keyword_weight=file.retrieval.keyword_weight,
            decay=file.decay.enabled,
            decay_weight=file.decay.weight,
            half_lives={lvl: file.half_life_days(lvl) for lvl in ("low", "medium", "high")},
            candidates=file.decay.rerank_candidates,
            dedup=file.retrieval.dedup_on_write,
            dedup_min_cosine=file.retrieval.dedup_min_cosine,
        )

    def age(self, record: MemoryRecord, now: datetime) -> float:
        return age_days(record.updated_at or record.created_at, now)

    def growth(self, record: MemoryRecord, now: datetime) -> float:
        """How much age grows ``record``'s distance (1.0 = not at all)."""
        if not self.decay:
            return 1.0
        half_life = self.half_lives.get(record.importance, 0.0)
        factor = decay_factor(self.age(record, now), half_life)
        return decayed_distance(1.0, factor, self.decay_weight)


def _now(clock: Callable[[], str]) -> datetime:
    try:
        return datetime.fromisoformat(clock())
    except (TypeError, ValueError):
        return datetime.now(UTC)


def _keep(meta: dict[str, Any], importance: str | None, origins: OriginFilter) -> bool:
    if importance is not None and meta.get("importance") != importance:
        return False
    return origins.allows_meta(meta)


INLINE_KEYWORD_ROWS = 64
"""Partitions up to this size get their keyword index built on the event loop
(about 35 µs a memory); larger ones in a worker thread. Building it for a
10,000-memory partition takes ~0.35 s: on the loop, 50 users asking at once
stalled it for seconds."""


async def _build_keywords(store: SearchStore, documents: list[str | None]) -> KeywordIndex:
    if len(documents) <= INLINE_KEYWORD_ROWS:
        return KeywordIndex(documents)
    async with store.index.heavy:  # GIL-bound work: a few at a time (see LOAD_CONCURRENCY)
        return await asyncio.to_thread(KeywordIndex, documents)


async def _keywords_of(store: SearchStore, entry: Any) -> KeywordIndex:
    index = entry.derived.get(_KEYWORD_KEY)
    if index is None:
        index = await _build_keywords(store, entry.documents)
        entry.derived[_KEYWORD_KEY] = index
    return index


async def _partition_rows(
    store: SearchStore, partition: str
) -> tuple[list[str], list[str | None], list[dict[str, Any]]]:
    """Every memory of ``partition`` from Chroma (when the partition index cannot answer)."""
    res = await store._run(
        lambda c: c.get(where=where_partition(partition), include=["documents", "metadatas"])
    )
    ids = list(res["ids"])
    docs: list[str | None] = list(res.get("documents") or [None] * len(ids))
    metas = [dict(m or {}) for m in (res.get("metadatas") or [None] * len(ids))]
    return ids, docs, metas


async def _snapshot(store: SearchStore, partition: str) -> Any:
    """The partition's cached rows, or ``None`` (Chroma answers instead)."""
    try:
        return await store.index.snapshot(store, partition)
    except Exception:
        store.index.drop(partition)
        return None


async def _keyword_hits(
    store: SearchStore,
    entry: Any,
    partition: str,
    text: str,
    vector: Sequence[float],
    limit: int,
    importance: str | None,
    origins: OriginFilter,
    cjk_unit: float,
) -> list[tuple[MemoryRecord, float]]:
    """``(record, keyword part)`` of the best keyword matches: the share of the query's
    keyword weight a memory holds, CJK terms counted at ``cjk_unit`` (what the ranking
    adds). Records carry distances when the partition's vectors are cached (keyword-only
    hits are shown like the others)."""
    if entry is not None:
        ids, docs, metas = entry.ids, entry.documents, entry.metadatas
        keywords = await _keywords_of(store, entry)
    else:
        ids, docs, metas = await _partition_rows(store, partition)
        keywords = await _build_keywords(store, docs)
    scores = keywords.coverage(text, cjk_unit=cjk_unit)
    rows = np.asarray([r for r in scores if _keep(metas[r], importance, origins)], dtype=np.int64)
    query = np.asarray(vector, dtype=np.float32)
    by_score = np.asarray([-scores[r] for r in rows.tolist()], dtype=np.float64)
    distances: np.ndarray | None = None
    if entry is not None and query.shape == (entry.dim,) and len(rows):
        diff = entry.vectors[rows] - query
        distances = close = np.einsum("ij,ij->i", diff, diff)
        # Equal shares (often only a name or a common word matched): the closest first.
        order = np.lexsort((close, by_score))
    else:
        order = np.lexsort((np.asarray([ids[r] for r in rows.tolist()]), by_score))
    out: list[tuple[MemoryRecord, float]] = []
    for i in order[:limit].tolist():
        r = int(rows[i])
        distance = None if distances is None else float(distances[i])
        record = MemoryRecord.from_chroma(ids[r], docs[r], metas[r], distance)
        out.append((record, scores[r]))
    return out


_DAYS_KEY = "days"
"""Key of the memories' calendar days in a cached partition entry's ``derived`` dict."""


def _day_of(meta: dict[str, Any]) -> date | None:
    """The calendar day (UTC, like the stored stamps and the clock) a memory was written."""
    when = parse_time(str(meta.get("created_at") or meta.get("updated_at") or ""))
    return None if when is None else when.astimezone(UTC).date()


def _days(entry: Any, metas: Sequence[dict[str, Any]]) -> list[date | None]:
    """Every row's day, cached with the partition's snapshot (parsed once, not per question)."""
    if entry is None:
        return [_day_of(m) for m in metas]
    days = entry.derived.get(_DAYS_KEY)
    if days is None:
        days = entry.derived[_DAYS_KEY] = [_day_of(m) for m in metas]
    return days


async def _period_hits(
    store: SearchStore,
    entry: Any,
    partition: str,
    named: Period | str,
    vector: Sequence[float],
    limit: int,
    importance: str | None,
    origins: OriginFilter,
) -> list[MemoryRecord]:
    """Memories written in the period a query names (the closest ``limit``), with distances
    when the partition's vectors are cached. :data:`FIRST_CHAT` is the oldest memory's day."""
    if entry is not None:
        ids, docs, metas = entry.ids, entry.documents, entry.metadatas
    else:
        ids, docs, metas = await _partition_rows(store, partition)
    days = _days(entry, metas)
    if isinstance(named, Period):
        period = named
    else:  # FIRST_CHAT
        known = [d for d in days if d is not None]
        if not known:
            return []
        period = Period.of_days(min(known), min(known), UTC)
    rows = [
        r
        for r, day in enumerate(days)
        if day is not None and period.holds_day(day) and _keep(metas[r], importance, origins)
    ]
    query = np.asarray(vector, dtype=np.float32)
    distances: list[float | None] = [None] * len(rows)
    if entry is not None and query.shape == (entry.dim,) and rows:
        diff = entry.vectors[np.asarray(rows, dtype=np.int64)] - query
        distances = np.einsum("ij,ij->i", diff, diff).tolist()
    order = sorted(range(len(rows)), key=lambda i: (distances[i] is None, distances[i] or 0.0))
    return [
        MemoryRecord.from_chroma(ids[rows[i]], docs[rows[i]], metas[rows[i]], distances[i])
        for i in order[:limit]
    ]


async def search(
    store: SearchStore,
    partition: str,
    text: str,
    vector: Sequence[float],
    *,
    top_k: int,
    importance: str | None,
    origins: OriginFilter,
    settings: RetrievalSettings,
) -> list[MemoryRecord]:
    """The ``top_k`` memories of ``partition`` for the query ``text`` / ``vector``
    (only those ``origins`` lets through)."""
    script = settings.script(text)
    now = _now(store.clock)
    utc = now.astimezone(UTC) if now.tzinfo is not None else now  # days are UTC days
    named = named_period(text, utc) if settings.time_weight > 0 else None
    hybrid = settings.hybrid and settings.keyword_weight > 0
    if not hybrid and not settings.decay and named is None:
        return await store._query_vector(
            partition, vector, top_k=top_k, importance=importance, origins=origins
        )
    pool = max(top_k, settings.candidates)
    by_vector = await store._query_vector(
        partition, vector, top_k=pool, importance=importance, origins=origins
    )
    records = {r.id: r for r in by_vector}
    entry = await _snapshot(store, partition)
    bonus: dict[str, float] = {}
    if hybrid:
        hits = await _keyword_hits(
            store, entry, partition, text, vector, pool, importance, origins, script.cjk_unit
        )
        for record, part in hits:
            records.setdefault(record.id, record)
            bonus[record.id] = settings.keyword_weight * part
    if named is not None:
        then = await _period_hits(store, entry, partition, named, vector, pool, importance, origins)
        for record in then:
            records.setdefault(record.id, record)
            bonus[record.id] = bonus.get(record.id, 0.0) + settings.time_weight
    distances = {
        memory_id: None if r.distance is None else r.distance * settings.growth(r, now)
        for memory_id, r in records.items()
    }
    ranked = [records[i] for i in combine(distances, bonus, 1.0)]
    return [replace(r) for r in ranked[:top_k]]
