"""The reads of :class:`~.memory_store.MemoryStore`: every one names what it may see.

A base class of the store (not a door of its own: nothing outside ``storage/`` imports
it). Each read takes a :class:`~.scope.View` and refuses anything else; a question is
ranked by :mod:`.partition.retrieval`, by keywords alone when it has no vector
(:mod:`.vectors`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.calendar import OwnerCalendar
from ..core.records import MemoryRecord, OriginFilter, utc_now, where_partition
from ..ranking.when import Period
from .chroma.connection import ChromaConnection
from .memory_collection import MemoryCollection
from .partition.index import query_records
from .partition.keyword_channel import _keyword_hits, _snapshot
from .partition.retrieval import RetrievalSettings, search
from .partition.timeline import of_period, period_test
from .scope import View
from .vectors import Vectors

__all__ = ["MemoryReads"]


class MemoryReads(MemoryCollection):
    """Reads of one partition's memories, each through a :class:`~.scope.View`."""

    def __init__(self, connection: ChromaConnection, name: str, vectors: Vectors) -> None:
        super().__init__(connection, name)
        self.vectors = vectors
        """Where vectors come from; ``None`` instead of an outage (:mod:`.vectors`)."""
        self.clock: Callable[[], str] = utc_now
        """ISO timestamps for ``created_at`` / ``updated_at`` (replaceable in tests)."""
        self.settings = RetrievalSettings()
        """Ranking (hybrid, decay) and merging settings (``[retrieval]``, ``[decay]``)."""
        self.calendar = OwnerCalendar()
        """The owner's days (``[memory] timezone``): periods in questions, ``since`` /
        ``until``. Set by the runtime (its one calendar)."""
        self._dimension: tuple[tuple[int, str], int] | None = None

    async def stored_dimension(self) -> int | None:
        """The dimension of the collection's vectors (``None``: empty)."""
        return await self._stored_dimension()

    async def _stored_dimension(self) -> int | None:
        """The dimension of the collection's vectors (``None``: empty), read once per
        collection handle (a remap replaces the collection, and with it the key)."""
        col = await self.collection()
        key = (self.connection.generation, str(col.id))
        if self._dimension is not None and self._dimension[0] == key:
            return self._dimension[1]
        res = await self._run(lambda c: c.get(limit=1, include=["embeddings"]))
        found = res.get("embeddings")
        if found is None or not len(found):
            return None
        self._dimension = (key, len(found[0]))
        return self._dimension[1]

    # -- reads (each names what it may see: a View built by storage/scope) ----------

    async def get(self, view: View, memory_id: str) -> MemoryRecord | None:
        """The memory ``memory_id`` if ``view`` shows it, else ``None`` (also for an id of
        another partition, or of an origin the view leaves out: like a missing id)."""
        View.check(view)
        record = await self._get(view.partition, memory_id)
        return record if record is not None and view.origins.allows(record.origin) else None

    async def _get(self, partition: str, memory_id: str) -> MemoryRecord | None:
        """The memory ``memory_id`` if it belongs to ``partition`` (any origin), else ``None``.

        Fetches by id alone and compares the stored partition: as cheap in a
        10,000-memory partition as in an empty one. A memory of another
        partition is never returned, and callers mutate only what this returned.
        """
        res = await self._run(lambda c: c.get(ids=[memory_id], include=["documents", "metadatas"]))
        if not res["ids"]:
            return None
        meta = (res.get("metadatas") or [None])[0]
        if meta is None or meta.get("user_id") != partition:
            return None
        docs = res.get("documents") or [None]
        return MemoryRecord.from_chroma(res["ids"][0], docs[0], meta)

    async def query(
        self,
        view: View,
        text: str,
        *,
        top_k: int = 5,
        importance: str | None = None,
        window: Period | None = None,
    ) -> list[MemoryRecord]:
        """The best memories ``view`` shows for ``text``: vector and keyword channels, the
        period the text names, age decay (:mod:`.partition.retrieval`; ``distance`` is the
        vector distance); only those of ``window`` when given. Without the question's vector
        (no embedding model, an outage, later than ``vectors.query_timeout``) it ranks by
        keywords, the period and importance."""
        View.check(view)
        vector = await self.vectors.query(text)
        if vector is not None and len(vector) != (await self._stored_dimension() or len(vector)):
            vector = None  # another model behind the service's name: keywords answer
        return await self.search(
            view, text, vector, top_k=top_k, importance=importance, window=window
        )

    async def search(
        self,
        view: View,
        text: str,
        vector: Sequence[float] | None,
        *,
        top_k: int = 5,
        importance: str | None = None,
        window: Period | None = None,
    ) -> list[MemoryRecord]:
        """:meth:`query` for a caller that has embedded ``text`` already (``vector``):
        active memory's recall and extraction reuse their one query embedding
        (``None``: by keywords only)."""
        View.check(view)
        return await search(
            self,
            view.partition,
            text,
            vector,
            top_k=top_k,
            importance=importance,
            origins=view.origins,
            settings=self.settings,
            window=window,
        )

    async def keyword_matches(
        self, view: View, text: str, *, top_k: int
    ) -> list[tuple[MemoryRecord, float]]:
        """The ``top_k`` memories ``view`` shows that share keywords with ``text``, best
        first, each with its share of the text's keyword weight (0–1, CJK terms at full
        weight: the keyword-only ranking's part). No vector: active recall without
        embeddings judges a memory by this share alone."""
        View.check(view)
        entry = await _snapshot(self, view.partition)
        return await _keyword_hits(
            self, entry, view.partition, text, None, top_k, None, view.origins, 1.0
        )

    async def query_vector(
        self,
        view: View,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        importance: str | None = None,
    ) -> list[MemoryRecord]:
        """The nearest memories ``view`` shows (vector distance only)."""
        View.check(view)
        return await self._query_vector(
            view.partition, vector, top_k=top_k, importance=importance, origins=view.origins
        )

    async def _query_vector(
        self,
        partition: str,
        vector: Sequence[float],
        *,
        top_k: int,
        importance: str | None,
        origins: OriginFilter,
        load: bool = True,
    ) -> list[MemoryRecord]:
        """The nearest memories; ``load=False`` inside the partition's write section."""
        args = (self, partition, vector, top_k, importance, origins)
        if (hits := await self.index.query(*args, load=load)) is not None:
            return hits
        where = where_partition(
            partition, importance=importance, origins=origins, with_vectors=True
        )
        q: Any = {"query_embeddings": [list(vector)], "n_results": top_k, "where": where}
        include: Any = ["documents", "metadatas", "distances"]
        return query_records(await self._run(lambda c: c.query(**q, include=include)))

    async def list(
        self, view: View, *, limit: int = 20, offset: int = 0, window: Period | None = None
    ) -> list[MemoryRecord]:
        """Memories ``view`` shows, oldest first; only those of ``window`` when given."""
        where = View.check(view).where()
        if window is not None:
            return (await self._within(view, window))[offset : offset + limit]
        res = await self._run(
            lambda c: c.get(
                where=where, limit=limit, offset=offset, include=["documents", "metadatas"]
            )
        )
        docs = res.get("documents") or [None] * len(res["ids"])
        metas = res.get("metadatas") or [None] * len(res["ids"])
        return [
            MemoryRecord.from_chroma(i, d, m)
            for i, d, m in zip(res["ids"], docs, metas, strict=False)
        ]

    def period_test(self, text: str) -> Callable[[MemoryRecord], bool]:
        """Whether a memory belongs to the period ``text`` names (now, the owner's days)."""
        on = self.settings.time_weight > 0
        return period_test(text, self.calendar.local(self.clock()), self.calendar, on=on)

    async def _within(self, view: View, window: Period) -> list[MemoryRecord]:
        """Every memory ``view`` shows of ``window``, in the order they were said."""
        where = view.where()
        res = await self._run(lambda c: c.get(where=where, include=["documents", "metadatas"]))
        return of_period(res, window, self.calendar)

    async def count(self, view: View, *, window: Period | None = None) -> int:
        """Memories ``view`` shows (the whole collection: :meth:`count_all`); only those of
        ``window`` when given."""
        View.check(view)
        if window is not None:
            return len(await self._within(view, window))
        if not view.origins.narrows:
            return await self._count(view.partition)
        where = view.where()
        res = await self._run(lambda c: c.get(where=where, include=[]))
        return len(res["ids"])

    async def _count(self, partition: str) -> int:
        """Memories in ``partition``, every origin (the limit counts them all)."""
        where = where_partition(partition)
        res = await self._run(lambda c: c.get(where=where, include=[]))
        return len(res["ids"])
