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
from collections.abc import Sequence
from typing import Any

from nonebot import logger

from ..core.errors import VectorStoreError
from ..core.protocols import Embedder, Fence
from ..core.records import PENDING_KEY, MemoryRecord
from ..core.writes import NewMemory, WriteRules
from .archive.removal import move_to_archive, row_state, unchanged_where
from .archive.store import REASON_DELETED, REASON_OUTDATED, REASON_UPDATED
from .chroma.connection import ChromaConnection
from .chroma.paging import READ_PAGE_SIZE, Item, iter_pages
from .memory_collection import Row
from .memory_reads import MemoryReads
from .merge import WriteResult, merge_repeat
from .partition.counts import PartitionCounts
from .partition.retrieval import RetrievalSettings
from .pending import PENDING_WHERE, Settled, pending_rows, settle
from .room import EXPLICIT, make_room
from .scope import View, operator_view
from .users.tombstones import ForgottenUsers
from .vectors import UNKNOWN_DIMENSION, Vectors, placeholder_vector
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
    "Settled",
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


class MemoryStore(MemoryReads):
    """Memories in one Chroma collection, every operation confined to a partition."""

    def __init__(
        self,
        connection: ChromaConnection,
        embedder: Embedder,
        name: str = MEMORY_COLLECTION,
        *,
        embeddings: bool = True,
    ) -> None:
        super().__init__(connection, name, Vectors(embedder, enabled=embeddings))
        self.keep_versions = True
        """Whether a changed text keeps the previous one in the archive (``[archive] keep_history``)."""
        self.forgotten: ForgottenUsers | None = None
        """Users whose data a forget removed (``storage.users.tombstones``): every restore path
        drops their rows from before it. Set by the runtime (it knows the data dir)."""

    # -- embedding --------------------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        return self.vectors.embedder

    async def _placeholder(self) -> list[float]:
        """A pending memory's stored vector, of the collection's dimension (an empty
        collection takes the service's last known one, else :data:`.vectors.UNKNOWN_DIMENSION`)."""
        dimension = await self._stored_dimension() or self.vectors.dimension
        return placeholder_vector(dimension or UNKNOWN_DIMENSION)

    async def _vector_of(self, text: str) -> list[float] | None:
        """The vector of a text to store, or ``None`` (keep it pending): the service failed,
        is off, or answered vectors of another dimension than the stored ones (a model
        changed behind the service's name: the text is kept, not refused)."""
        got = await self.vectors.documents([text])
        if got is None:
            return None
        stored = await self._stored_dimension()
        if stored is not None and len(got[0]) != stored:
            logger.warning(
                f"[Memory] 嵌入向量维度 {len(got[0])} 与向量库的 {stored} 不一致，"
                "本条记忆先按关键词保存；更换了嵌入模型请运行 `ambot memory reindex`"
            )
            return None
        return got[0]

    # -- writes ---------------------------------------------------------------------

    async def write(
        self,
        memory: NewMemory,
        rules: WriteRules = PLAIN_WRITE,
        *,
        vector: Sequence[float] | None = None,
    ) -> WriteResult:
        """Store ``memory`` as ``rules`` allow: the one write path of a new memory.

        The text is embedded first unless ``vector`` is given; when it cannot be (no
        embedding model, or the service fails), the memory is stored at once *pending*
        (:mod:`.vectors`: found by keywords, embedded in the background, merged with a
        repeat when its vector arrives). Then, in the partition's write section (:meth:`writing`,
        shared with writers of any process): the fence; with ``rules.merge`` (and
        ``[retrieval] dedup`` on) a true repeat of a memory of the partition, written
        with the same scope and origin, is refreshed instead (:mod:`.merge`; a merge adds
        nothing, so a full partition accepts a repeated fact, and two writers of one
        fact never both add it); a fixed id (``memory.memory_id``) stored already, live or
        archived, writes nothing (``existed``); with ``rules.limit`` a full partition refuses unless
        an automatic memory gives way (:mod:`.room`); then the add.
        """
        pending = False
        if vector is None:
            vector = await self._vector_of(memory.content)
            pending = vector is None
            vector = await self._placeholder() if vector is None else vector
        merge = rules.merge and self.settings.dedup and not pending
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
            record.pending = pending
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
        if pending:
            self.vectors.kept_pending()
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
        pending = False
        if content is not None:
            vector = stored_vector
            if vector is None:
                vector = await self._vector_of(content)
                pending = vector is None
                vector = await self._placeholder() if vector is None else vector
        async with self.writing(partition):
            if fence is not None:
                await fence()
            current = await self._get(partition, memory_id)
            if current is None:
                return None
            was_pending = current.pending
            if content is not None and content != current.content:
                await self.keep_history(dataclasses.replace(current), None, reason=REASON_UPDATED)
            if content is not None:
                current.content = content
                current.pending = pending
            if tags is not None:
                current.tags = list(tags)
            if importance is not None:
                current.importance = importance
            if origin is not None:
                current.origin = origin
            if event_time is not None:
                current.event_time = event_time
            current.updated_at = self.clock()
            meta = current.to_metadata()
            if was_pending and not current.pending:
                meta[PENDING_KEY] = False  # Chroma merges metadata: the flag must be cleared
            kwargs: dict[str, Any] = {"ids": [memory_id], "metadatas": [meta]}
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
        if pending:
            self.vectors.kept_pending()
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

    # -- pending memories (stored without their vector: :mod:`.pending`) ----------------

    async def pending_batch(self, limit: int) -> list[MemoryRecord]:
        """Up to ``limit`` pending memories of every partition (the background embedding:
        an operator door, never a chat's)."""
        res = await self._run(
            lambda c: c.get(where=PENDING_WHERE, limit=limit, include=["documents", "metadatas"])
        )
        return pending_rows(res)

    async def count_pending(self) -> int:
        """Pending memories in the whole collection (status, the console)."""
        res = await self._run(lambda c: c.get(where=PENDING_WHERE, include=[]))
        return len(res["ids"])

    async def settle(self, record: MemoryRecord, vector: Sequence[float]) -> Settled:
        """Store the vector of the pending memory ``record`` (or merge it into an older
        repeat): :func:`.pending.settle`."""
        return await settle(self, record, vector)

    async def link_versions(self, partition: str, older_id: str, newer_id: str) -> bool:
        """Link two memories of ``partition`` as versions of one fact (:mod:`.versions`)."""
        return await link_versions(self, partition, older_id, newer_id)
