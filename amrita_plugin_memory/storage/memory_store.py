"""Memories in one Chroma collection, every operation confined to one partition.

:class:`MemoryStore` makes an id of another partition behave exactly like an
id that does not exist: searches, listings and counts filter inside the
database query (``where user_id == partition``); operations on one id fetch
that id alone and check the stored partition before anything is returned or
changed (a ``where`` next to ``ids`` makes Chroma evaluate the filter over the
whole partition, which made by-id cost grow with its size).

Reads fail closed: every read and count takes a :class:`~.scope.View` (a partition and
the origins it may show, built by :class:`~.scope.Scope` only) and refuses anything else
(``TypeError``); there is no default that means "everything". The whole collection is
read only by methods that say so (``count_all``, ``iter_all_records``, ``scan_all``,
``fetch_anywhere``), for operators and the work on stored memories as a whole.

It is the only door into memories from outside ``storage/``: the partition index and
ranking, merging, room-making, removal and paging are private to ``storage/`` (checked by
``.ci/check_architecture.py``); the few of their names the layers above need are
re-exported here.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..core.calendar import OwnerCalendar
from ..core.errors import VectorStoreError
from ..core.protocols import Embedder, Fence, TextKind
from ..core.records import MemoryRecord, OriginFilter, utc_now, where_partition
from ..core.writes import NewMemory, WriteRules
from ..ranking.when import Period
from .archive.removal import move_to_archive, row_state, unchanged_where
from .archive.store import REASON_DELETED, REASON_OUTDATED, REASON_UPDATED
from .chroma.connection import ChromaConnection
from .chroma.paging import READ_PAGE_SIZE, Item, iter_pages
from .memory_collection import MemoryCollection, Row
from .merge import WriteResult, merge_repeat
from .partition.counts import PartitionCounts
from .partition.index import query_records
from .partition.retrieval import RetrievalSettings, search
from .partition.timeline import of_period, period_test
from .room import EXPLICIT, make_room
from .scope import View, operator_view
from .users.tombstones import ForgottenUsers
from .versions import link_versions

# Besides the store: the names of storage's private modules that the layers above use
# (``storage/partition``, ``storage/merge``, ``storage/room``, ``storage/archive/removal``
# and ``storage/chroma/paging`` are imported only inside ``storage/``).
__all__ = [
    "EXPLICIT",
    "MEMORY_COLLECTION",
    "READ_PAGE_SIZE",
    "REASON_OUTDATED",
    "Item",
    "MemoryStore",
    "NewMemory",
    "PartitionCounts",
    "RetrievalSettings",
    "Row",
    "View",
    "WriteResult",
    "WriteRules",
    "iter_pages",
    "operator_view",
    "row_state",
    "unchanged_where",
]

MEMORY_COLLECTION = "amrita_user_memory"

PLAIN_WRITE = WriteRules()
"""A plain add: no repeat merged, no limit, nothing displaced, no fence."""


class MemoryStore(MemoryCollection):
    """Memories in one Chroma collection, every operation confined to a partition."""

    def __init__(
        self,
        connection: ChromaConnection,
        embedder: Embedder,
        name: str = MEMORY_COLLECTION,
    ) -> None:
        super().__init__(connection, name)
        self.embedder = embedder
        self.clock: Callable[[], str] = utc_now
        """ISO timestamps for ``created_at`` / ``updated_at`` (replaceable in tests)."""
        self.keep_versions = True
        """Whether a changed text keeps the previous one in the archive (``[archive] keep_history``)."""
        self.settings = RetrievalSettings()
        """Ranking (hybrid, decay) and merging settings (``[retrieval]``, ``[decay]``)."""
        self.calendar = OwnerCalendar()
        """The owner's days (``[memory] timezone``): periods in questions, ``since`` /
        ``until``. Set by the runtime (its one calendar)."""
        self.forgotten: ForgottenUsers | None = None
        """Users whose data a forget removed (``storage.users.tombstones``): every restore path
        drops their rows from before it. Set by the runtime (it knows the data dir)."""

    # -- embedding --------------------------------------------------------------

    async def _embed(self, texts: Sequence[str], kind: TextKind = "document") -> list[list[float]]:
        return await self.embedder.embed(list(texts), kind)

    # -- writes ---------------------------------------------------------------------

    async def write(
        self,
        memory: NewMemory,
        rules: WriteRules = PLAIN_WRITE,
        *,
        vector: Sequence[float] | None = None,
    ) -> WriteResult:
        """Store ``memory`` as ``rules`` allow: the one write path of a new memory.

        The text is embedded first (an embedding failure leaves nothing behind) unless
        ``vector`` is given. Then, in the partition's write section (:meth:`writing`,
        shared with writers of any process): the fence; with ``rules.merge`` (and
        ``[retrieval] dedup`` on) a true repeat of a memory of the partition, written
        with the same scope and origin, is refreshed instead (:mod:`.merge`; a merge adds
        nothing, so a full partition accepts a repeated fact, and two writers of one
        fact never both add it); a fixed id (``memory.memory_id``) stored already, live or
        archived, writes nothing (``existed``); with ``rules.limit`` a full partition refuses unless
        an automatic memory gives way (:mod:`.room`); then the add.
        """
        if vector is None:
            vector = (await self._embed([memory.content]))[0]
        merge = rules.merge and self.settings.dedup
        partition = memory.partition
        if merge:
            await self._warm(partition)
        async with self.writing(partition):
            if rules.fence is not None:
                await rules.fence()
            if memory.memory_id and (held := await self.held(memory.memory_id)) is not None:
                return WriteResult(held, existed=True)
            if merge and (merged := await merge_repeat(self, memory, vector)) is not None:
                return WriteResult(merged, merged=True)
            if rules.limit is not None:
                await make_room(self, partition, rules.limit, rules.displace)
            record = memory.record(memory.memory_id or uuid.uuid4().hex, self.clock())
            try:
                await self._write(
                    lambda c: c.add(
                        ids=[record.id],
                        documents=[record.content],
                        embeddings=[vector],  # type: ignore[arg-type]
                        metadatas=[record.to_metadata()],
                    )
                )
            except BaseException:
                self.drop_views(partition)  # the add may or may not have landed
                raise
            self.counts.adjust(partition, +1)
            self.recent.added(partition, record.id)
            self.index.added(partition, vector, record)
        return WriteResult(record)

    async def held(self, memory_id: str) -> MemoryRecord | None:
        """The memory stored under ``memory_id``, live or archived (deleted, swept), in
        whatever partition; ``None``: the id is free (a fixed id of an import)."""
        rows = await self.fetch_anywhere([memory_id])
        if rows:
            return rows[0].record
        archived = await self.archive.get(memory_id)
        return archived[0].record if archived is not None else None

    async def add(
        self,
        memory: NewMemory,
        rules: WriteRules = PLAIN_WRITE,
        *,
        vector: Sequence[float] | None = None,
    ) -> MemoryRecord:
        """:meth:`write` for a caller that wants only the stored record (an operator's
        or a benchmark's plain add)."""
        return (await self.write(memory, rules, vector=vector)).record

    async def _warm(self, partition: str) -> None:
        """Load the partition's index before the write section (a load takes the
        partition's lock, which the section holds), so the repeat is looked for in
        memory; a load that fails leaves it to Chroma, inside the section."""
        try:
            await self.index.snapshot(self, partition)
        except Exception:
            self.index.drop(partition)

    async def update(
        self,
        partition: str,
        memory_id: str,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        importance: str | None = None,
        stored_vector: Sequence[float] | None = None,
        origin: str | None = None,
        event_time: str | None = None,
        fence: Fence | None = None,
    ) -> MemoryRecord | None:
        """Change a memory of ``partition``; ``None`` if it is not there.

        A changed text first keeps the previous version in the archive
        (:meth:`keep_history`): if that fails, nothing changes. ``stored_vector``
        is the vector of ``content`` when it is known already (an archived
        version restored), so it is not embedded again. ``origin`` moves the
        memory to another origin (a text from a private chat makes it private).
        """
        vector: Sequence[float] | None = None
        if content is not None:
            vector = stored_vector
            if vector is None:
                vector = (await self._embed([content]))[0]
        async with self.writing(partition):
            if fence is not None:
                await fence()
            current = await self._get(partition, memory_id)
            if current is None:
                return None
            if content is not None and content != current.content:
                await self.keep_history(dataclasses.replace(current), None, reason=REASON_UPDATED)
            if content is not None:
                current.content = content
            if tags is not None:
                current.tags = list(tags)
            if importance is not None:
                current.importance = importance
            if origin is not None:
                current.origin = origin
            if event_time is not None:
                current.event_time = event_time
            current.updated_at = self.clock()
            kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [current.to_metadata()]}
            if vector is not None:
                kwargs.update(documents=[current.content], embeddings=[vector])
            try:
                await self._write(lambda c: c.update(**kwargs))
                if await self._vanished(memory_id):
                    raise VectorStoreError(f"记忆 {memory_id} 刚被另一个进程移入归档，修改未生效")
            except BaseException:
                self.drop_views(partition)
                raise
            self.index.updated(partition, vector, current)
        return current

    async def delete(
        self,
        partition: str,
        memory_id: str,
        *,
        reason: str = REASON_DELETED,
        fence: Fence | None = None,
    ) -> bool:
        """Move a memory of ``partition`` into the archive; ``False`` if it is not there.

        Every delete keeps the memory (reason ``deleted``, same id and stored
        vector, restorable): it is archived under the partition's lock before
        the live row goes, and if that fails nothing is deleted
        (:func:`.archive.removal.move_to_archive`). Only a forget (``upkeep/users/erase``) removes data.
        """
        async with self.writing(partition):
            if fence is not None:
                await fence()
            # Ownership is checked under the partition's lock; only key
            # migration moves a memory between partitions, and it runs before
            # the bot serves anyone.
            try:
                moved = await move_to_archive(self, partition, memory_id, reason=reason)
            except BaseException:
                self.drop_views(partition)
                raise
            if moved:
                self.counts.adjust(partition, -1)
                self.recent.removed(partition, memory_id)
                self.index.removed(partition, memory_id)
        return moved

    async def keep_history(
        self, previous: MemoryRecord, vector: Sequence[float] | None, *, reason: str
    ) -> None:
        """Keep ``previous`` (a memory's text before it changes) in the archive.

        Called under the partition's lock before the live row changes, so a
        failure here (raised) leaves the memory as it was: an update is never a
        silent loss. Without ``vector`` the stored one is read by id (one call;
        the archive never embeds). Nothing happens with ``keep_versions`` off.
        """
        if not self.keep_versions:
            return
        # Refused here while a remap marks the live collection: no version is
        # written into an archive that the remap would then not cover.
        await self.guard.for_write(self.name)
        if vector is None:
            vector = await self._stored_vector(previous.id)
            if vector is None:
                raise VectorStoreError("读取原记忆的向量失败，未修改记忆")
        await self.archive.save_version(previous, vector, reason=reason)

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
        vector distance); only those of ``window`` when given."""
        View.check(view)
        vector = (await self._embed([text], "query"))[0]
        return await self.search(
            view, text, vector, top_k=top_k, importance=importance, window=window
        )

    async def search(
        self,
        view: View,
        text: str,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        importance: str | None = None,
        window: Period | None = None,
    ) -> list[MemoryRecord]:
        """:meth:`query` for a caller that has embedded ``text`` already (``vector``):
        active memory's recall and extraction reuse their one query embedding."""
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
        where = where_partition(partition, importance=importance, origins=origins)
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

    async def link_versions(self, partition: str, older_id: str, newer_id: str) -> bool:
        """Link two memories of ``partition`` as versions of one fact (:mod:`.versions`)."""
        return await link_versions(self, partition, older_id, newer_id)

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
