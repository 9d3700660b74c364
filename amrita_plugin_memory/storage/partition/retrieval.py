"""How ``read_memory`` ranks a partition: vector channel, keyword channel, age decay.

The vector channel is the store's nearest-neighbour search (the partition
index, or Chroma). The keyword channel looks up the query's tokens in the same
partition's documents (:mod:`.keyword_channel`; :class:`~...ranking.keywords.KeywordIndex`,
cached beside the partition's vectors in :class:`~.index.PartitionIndex`), for what a
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
A question that names a period (:func:`~...ranking.when.named_period`, relative to now in
the owner's zone) adds the memories of that period (:mod:`.timeline`: their event time
where known, else when they were said) to the candidates, and those on the question's
topic come first (:attr:`~RetrievalSettings.period_topic`); ``since`` / ``until`` keep only
the memories of a period.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

import numpy as np

from ...core.calendar import OwnerCalendar
from ...core.config import ConfigFile
from ...core.records import PENDING_KEY, MemoryRecord, OriginFilter
from ...ranking.keywords import CJK_UNIT
from ...ranking.scores import age_days, combine, decay_factor, decayed_distance
from ...ranking.versions import order_versions
from ...ranking.when import Period, has_cjk, named_period, tense
from .keyword_channel import RowStore, _keep, _keyword_hits, _partition_rows, _snapshot
from .timeline import RowTime, period_first, resolve, row_times, rows_within


class SearchStore(RowStore, Protocol):
    """What ranking needs of :class:`~..memory_store.MemoryStore` (which imports this module)."""

    clock: Callable[[], str]
    calendar: OwnerCalendar

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


__all__ = ["RetrievalSettings", "ScriptRanking", "SearchStore", "search"]


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
    """Added to the score of a memory of the period the query names (0: periods ignored)."""
    period_topic: float = 0.75
    """A memory of the named period comes first when its vector closeness is at least this
    share of the best candidate's (on the question's topic); 0: only :attr:`time_weight`."""

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


async def _period_hits(
    store: SearchStore,
    entry: Any,
    partition: str,
    period: Period,
    rows: list[int],
    ids: Sequence[str],
    docs: Sequence[str | None],
    metas: Sequence[dict[str, Any]],
    vector: Sequence[float] | None,
    limit: int,
) -> list[MemoryRecord]:
    """The memories of ``rows`` (those of a period), the closest ``limit`` first, with
    their vector distances (from the cached vectors, or read from Chroma for these rows:
    whether a memory of the period is on the question's topic is judged by them; none
    without the question's vector, none for a pending memory)."""
    query = np.asarray(vector if vector is not None else (), dtype=np.float32)
    distances: list[float | None] = [None] * len(rows)
    if vector is None:
        pass
    elif entry is not None and query.shape == (entry.dim,) and rows:
        diff = entry.vectors[np.asarray(rows, dtype=np.int64)] - query
        distances = np.einsum("ij,ij->i", diff, diff).tolist()
    elif rows and len(rows) <= PERIOD_FETCH_MAX:
        wanted = [ids[r] for r in rows]
        got = await store._run(lambda c: c.get(ids=wanted, include=["embeddings"]))
        found = got.get("embeddings")
        stored = dict(zip(got["ids"], [] if found is None else list(found), strict=False))
        for i, memory_id in enumerate(wanted):
            row = stored.get(memory_id)
            if row is not None and len(row) == query.shape[0]:
                diff = np.asarray(row, dtype=np.float32) - query
                distances[i] = float(diff @ diff)
    for i, r in enumerate(rows):
        if metas[r].get(PENDING_KEY):
            distances[i] = None
    order = sorted(range(len(rows)), key=lambda i: (distances[i] is None, distances[i] or 0.0))
    return [
        MemoryRecord.from_chroma(ids[rows[i]], docs[rows[i]], metas[rows[i]], distances[i])
        for i in order[:limit]
    ]


PERIOD_FETCH_MAX = 2_000
"""Without cached vectors, at most this many memories of a period get their vectors read
from Chroma (beyond it they rank by the period alone, without a topic check)."""


async def search(
    store: SearchStore,
    partition: str,
    text: str,
    vector: Sequence[float] | None,
    *,
    top_k: int,
    importance: str | None,
    origins: OriginFilter,
    settings: RetrievalSettings,
    window: Period | None = None,
) -> list[MemoryRecord]:
    """The ``top_k`` memories of ``partition`` for the query ``text`` / ``vector``
    (only those ``origins`` lets through; only those of ``window`` when it is given:
    ``read_memory``'s ``since`` / ``until``).

    Without ``vector`` (no embedding model, or the question could not be embedded) the
    keyword channel ranks alone, CJK terms at full weight (:data:`KEYWORDS_ONLY`); with
    it, pending memories (no vector yet) are found by the same full-weight keywords."""
    script = settings.script(text)
    calendar = store.calendar
    now = _now(store.clock).astimezone(calendar.zone)  # the owner's days
    named = named_period(text, now) if settings.time_weight > 0 else None
    hybrid = (settings.hybrid and settings.keyword_weight > 0) or vector is None
    if (
        vector is not None
        and not hybrid
        and not settings.decay
        and named is None
        and window is None
    ):
        plain = await store._query_vector(
            partition, vector, top_k=top_k, importance=importance, origins=origins
        )
        found = {r.id: r for r in plain}
        order = await _versions(store, partition, text, list(found), found, importance, origins)
        return [found[i] for i in order[:top_k]]
    pool = max(top_k, settings.candidates)
    entry = await _snapshot(store, partition)
    times: list[RowTime] = []
    ids: Sequence[str] = ()
    docs: Sequence[str | None] = ()
    metas: Sequence[dict[str, Any]] = ()
    if named is not None or window is not None:
        if entry is not None:
            ids, docs, metas = entry.ids, entry.documents, entry.metadatas
        else:
            ids, docs, metas = await _partition_rows(store, partition)
        times = row_times(entry, metas, calendar)
        kept = partial(_keep, importance=importance, origins=origins)
        allowed: set[str] | None = None
        if window is not None:
            inside = rows_within(window, times, metas, kept)
            allowed = {ids[r] for r in inside}
            # Every memory of the window is a candidate (the closest ``pool``): a filter.
            by_vector = await _period_hits(
                store, entry, partition, window, inside, ids, docs, metas, vector, pool
            )
        else:
            by_vector = await _nearest(store, partition, vector, pool, importance, origins)
    else:
        allowed = None
        by_vector = await _nearest(store, partition, vector, pool, importance, origins)
    records = {r.id: r for r in by_vector}
    bonus: dict[str, float] = {}
    if hybrid:
        # Keywords alone: CJK terms at full weight, the keyword share is the whole score.
        unit, weight = (script.cjk_unit, settings.keyword_weight) if vector else (1.0, 1.0)
        hits = await _keyword_hits(
            store, entry, partition, text, vector, pool, importance, origins, unit
        )
        if vector is not None:  # memories without a vector yet: by full-weight keywords
            pending = await _keyword_hits(
                store,
                entry,
                partition,
                text,
                vector,
                pool,
                importance,
                origins,
                1.0,
                pending_only=True,
            )
            # Scored as a vector hit (1 at best) plus its keywords: a full match is found.
            lift = (1.0 + settings.keyword_weight) / settings.keyword_weight
            hits += [(record, part * lift) for record, part in pending]
        for record, part in hits:
            if allowed is not None and record.id not in allowed:
                continue
            records.setdefault(record.id, record)
            bonus[record.id] = max(bonus.get(record.id, 0.0), weight * part)
    within: set[str] = set()
    period = None if named is None else resolve(named, times, calendar.zone)
    if period is not None:
        kept = partial(_keep, importance=importance, origins=origins)
        rows = rows_within(period, times, metas, kept)
        if allowed is not None:
            rows = [r for r in rows if ids[r] in allowed]
        then = await _period_hits(
            store, entry, partition, period, rows, ids, docs, metas, vector, pool
        )
        for record in then:
            records.setdefault(record.id, record)
            if records[record.id].distance is None and record.distance is not None:
                records[record.id] = record
            bonus[record.id] = bonus.get(record.id, 0.0) + settings.time_weight
            within.add(record.id)
    distances = {
        memory_id: None if r.distance is None else r.distance * settings.growth(r, now)
        for memory_id, r in records.items()
    }
    ranked = combine(distances, bonus, 1.0)
    ranked = period_first(ranked, distances, within, settings.period_topic)[:top_k]
    ranked = await _versions(store, partition, text, ranked, records, importance, origins)
    return [replace(records[i]) for i in ranked[:top_k]]


async def _nearest(
    store: SearchStore,
    partition: str,
    vector: Sequence[float] | None,
    top_k: int,
    importance: str | None,
    origins: OriginFilter,
) -> list[MemoryRecord]:
    """The vector channel's candidates (none without the question's vector)."""
    if vector is None:
        return []
    return await store._query_vector(
        partition, vector, top_k=top_k, importance=importance, origins=origins
    )


async def _versions(
    store: SearchStore,
    partition: str,
    text: str,
    ranked: list[str],
    records: dict[str, MemoryRecord],
    importance: str | None,
    origins: OriginFilter,
) -> list[str]:
    """``ranked`` with linked versions of a fact side by side (:mod:`...ranking.versions`):
    for a question not about the past, a newer version the ranking did not bring is
    read by id (from the same partition and origins only) and put before the older."""
    mode = tense(text)
    if not any(records[i].supersedes or records[i].superseded_by for i in ranked):
        return ranked
    if mode != "before":
        missing = [
            r.superseded_by
            for i in ranked
            if (r := records[i]).superseded_by and r.superseded_by not in records
        ]
        if missing:
            got = await store._run(lambda c: c.get(ids=missing, include=["documents", "metadatas"]))
            docs = got.get("documents") or [None] * len(got["ids"])
            metas = got.get("metadatas") or [None] * len(got["ids"])
            for memory_id, doc, meta in zip(got["ids"], docs, metas, strict=False):
                if meta is None or meta.get("user_id") != partition:
                    continue
                if _keep(meta, importance, origins):
                    records[memory_id] = MemoryRecord.from_chroma(memory_id, doc, meta)
                    ranked = [*ranked, memory_id]
    links = {i: (records[i].supersedes, records[i].superseded_by) for i in ranked}
    return order_versions(ranked, links, mode)
