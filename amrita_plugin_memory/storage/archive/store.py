"""The archive: memories past their lifetime, deleted memories, previous versions of updated ones.

Nothing the plugin archives is ever deleted (only a user's or operator's
forget removes data). The archive is a second
collection of the same Chroma store (:data:`ARCHIVE_COLLECTION`), so backups,
the fingerprint and re-embedding cover it like the live memories, and a
``read_memory`` / ``list_memory`` never sees it (they only query the live one).

A row keeps the memory's stored vector (copied, never re-embedded), its
document and its original metadata, plus:

* ``archived_at``: when it was archived (ISO, like ``updated_at``);
* ``reason``: :data:`REASON_EXPIRED` (the sweep), :data:`REASON_DELETED`
  (a delete: chat tool, command, console, L3 loop), :data:`REASON_UPDATED`
  (``update_memory`` kept the previous text) or :data:`REASON_MERGED` (a
  duplicate merged on write);
* ``memory_id``: the live memory the row belongs to.

A swept or deleted memory keeps its id (row id == ``memory_id``). A history version is
``<memory_id>~<digest>``, the digest of the version's ``updated_at`` and text:
saving the same version twice (a retried update) writes the same row once.

Every write goes through this collection's own :class:`~..chroma.remap_markers.CollectionGuard`
(refused while a remap replaces it); every Chroma call runs off the loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.calendar import OwnerCalendar
from ...core.records import MemoryRecord, utc_now
from ..chroma.connection import ChromaConnection
from ..chroma.remap_markers import CollectionGuard
from ..scope import View

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "ARCHIVE_COLLECTION",
    "REASONS",
    "REASON_DELETED",
    "REASON_DISPLACED",
    "REASON_EXPIRED",
    "REASON_MERGED",
    "REASON_OUTDATED",
    "REASON_UPDATED",
    "ArchiveStore",
    "ArchivedMemory",
    "archive_name",
    "history_id",
]

ARCHIVE_SUFFIX = "_archive"
ARCHIVE_COLLECTION = "amrita_user_memory" + ARCHIVE_SUFFIX
"""The archive of the plugin's memory collection (``amrita_user_memory``)."""

REASON_EXPIRED = "expired"
REASON_UPDATED = "updated"
REASON_MERGED = "merged"
REASON_DELETED = "deleted"
REASON_OUTDATED = "outdated"
"""Archived by active memory's extraction: no longer true, or the user asked to forget it."""
REASON_DISPLACED = "displaced"
"""An automatic memory that gave way to a new one in a full partition (``storage.room``)."""
REASONS: tuple[str, ...] = (
    REASON_EXPIRED,
    REASON_UPDATED,
    REASON_MERGED,
    REASON_DELETED,
    REASON_OUTDATED,
    REASON_DISPLACED,
)

META_ARCHIVED_AT = "archived_at"
META_REASON = "reason"
META_MEMORY_ID = "memory_id"

VERSION_SEPARATOR = "~"

T = TypeVar("T")


def archive_name(memory_collection: str) -> str:
    """The archive collection of ``memory_collection`` (:data:`ARCHIVE_COLLECTION` for the plugin's)."""
    return memory_collection + ARCHIVE_SUFFIX


def history_id(record: MemoryRecord) -> str:
    """Row id of a previous version of ``record`` (stable for the same version)."""
    digest = hashlib.sha1(
        f"{record.updated_at}\0{record.content}".encode(), usedforsecurity=False
    ).hexdigest()[:12]
    return f"{record.id}{VERSION_SEPARATOR}{digest}"


@dataclass(slots=True)
class ArchivedMemory:
    """One archive row: the memory as it was, why and when it was archived."""

    id: str
    """The row id: the memory's own id (swept, deleted) or ``<memory_id>~<digest>`` (a version)."""
    record: MemoryRecord
    """The memory as it was (``record.id`` is the live memory's id)."""
    reason: str
    archived_at: str

    @property
    def memory_id(self) -> str:
        return self.record.id

    @property
    def is_version(self) -> bool:
        """A previous version of a memory (rather than the swept or deleted memory itself)."""
        return self.id != self.record.id

    @classmethod
    def from_chroma(
        cls, row_id: str, document: str | None, meta: dict[str, Any] | None
    ) -> ArchivedMemory:
        meta = dict(meta or {})
        memory_id = str(meta.get(META_MEMORY_ID) or row_id.split(VERSION_SEPARATOR, 1)[0])
        return cls(
            id=row_id,
            record=MemoryRecord.from_chroma(memory_id, document, meta),
            reason=str(meta.get(META_REASON) or REASON_EXPIRED),
            archived_at=str(meta.get(META_ARCHIVED_AT) or ""),
        )

    def compact(self, calendar: OwnerCalendar) -> dict[str, Any]:
        """The short form the CLI and the chat command print (stamps in the owner's zone)."""
        out = self.record.compact(calendar)
        out.update(
            id=self.id,
            memory_id=self.memory_id,
            partition=self.record.partition,
            reason=self.reason,
            archived_at=calendar.show_stamp(self.archived_at) or self.archived_at,
            updated_at=calendar.show_stamp(self.record.updated_at) or self.record.updated_at,
        )
        return out


def archive_metadata(record: MemoryRecord, *, reason: str, archived_at: str) -> dict[str, Any]:
    """The stored metadata of ``record`` plus the archive's own keys."""
    meta = record.to_metadata()
    meta.update({META_ARCHIVED_AT: archived_at, META_REASON: reason, META_MEMORY_ID: record.id})
    return meta


class ArchiveStore:
    """The archive collection: saving rows (idempotent upserts), reading, removing."""

    def __init__(self, connection: ChromaConnection, name: str = ARCHIVE_COLLECTION) -> None:
        self.connection = connection
        self.name = name
        self.guard = CollectionGuard(connection)
        """Its own guard: the remap markers of this collection, its own cached handle."""
        self.clock: Callable[[], str] = utc_now
        """ISO timestamps for ``archived_at`` (replaceable in tests)."""
        self._exists = False

    # -- calls --------------------------------------------------------------------

    async def collection(self) -> Collection:
        return await self.guard.collection(self.name)

    def invalidate(self) -> None:
        """Forget the cached handle (after the collection was replaced)."""
        self.guard.invalidate()
        self._exists = False

    async def _run(self, fn: Callable[[Collection], T]) -> T:
        return await self.guard.run(self.name, fn, self.invalidate)

    async def _exists_now(self) -> bool:
        """Whether the collection exists: reads never create it (a store that never
        archived anything keeps exactly its collections, status and tests alike)."""
        if not self._exists:
            found = await self.connection.get_collection(self.name, create=False)
            self._exists = found is not None
        return self._exists

    async def _write(self, fn: Callable[[Collection], T]) -> T:
        """One archive write, refused while a remap replaces the collection."""
        return await self.guard.write(self.name, fn, self.invalidate)

    # -- writes -----------------------------------------------------------------------

    async def save(
        self,
        rows: Sequence[tuple[str, MemoryRecord, Sequence[float]]],
        *,
        reason: str,
        archived_at: str | None = None,
    ) -> None:
        """Save ``(row id, memory, stored vector)`` rows; saving a row twice is harmless.

        New rows are added, rows already archived (a move completed again after
        a crash) are overwritten: an embedded Chroma ``upsert`` costs about twice
        an ``add`` and holds the GIL meanwhile, and almost every row is new.
        """
        if not rows:
            return
        when = archived_at or self.clock()
        present = await self.ids([row_id for row_id, _, _ in rows])
        for existing in (False, True):
            part = [row for row in rows if (row[0] in present) == existing]
            if not part:
                continue
            kwargs: dict[str, Any] = {
                "ids": [row_id for row_id, _, _ in part],
                "documents": [record.content for _, record, _ in part],
                "embeddings": [[float(x) for x in vector] for _, _, vector in part],
                "metadatas": [
                    archive_metadata(r, reason=reason, archived_at=when) for _, r, _ in part
                ],
            }
            await self._write(lambda c, kw=kwargs, up=existing: (c.upsert if up else c.add)(**kw))

    async def save_version(
        self, previous: MemoryRecord, vector: Sequence[float], *, reason: str
    ) -> str:
        """Keep ``previous`` (the text before an update or merge) as a version; its row id."""
        row_id = history_id(previous)
        await self.save([(row_id, previous, vector)], reason=reason)
        return row_id

    async def remove(self, row_ids: Sequence[str]) -> None:
        """Delete archive rows (only once what they hold is live again, or kept as another row)."""
        if row_ids:
            ids = list(row_ids)
            await self._write(lambda c: c.delete(ids=ids))

    async def set_metadatas(
        self, row_ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
    ) -> None:
        """Replace the metadata of rows (a forget clearing a writer mark)."""
        if row_ids:
            ids, metas = list(row_ids), [dict(m) for m in metadatas]
            await self._write(lambda c: c.update(ids=ids, metadatas=metas))  # type: ignore[arg-type]

    async def rewrite_partition_keys(self, partition_of: Callable[[str], str | None]) -> int:
        """Rewrite every row's ``user_id`` with ``partition_of`` (key migration only;
        ``None`` or the same key leaves a row as it is). Returns the rows rewritten."""
        if not await self._exists_now():
            return 0
        rewritten = 0
        async for page in self.guard.pages(self.name, self.invalidate, with_documents=False):
            ids, metas = [], []
            for item in page:
                meta = dict(item.metadata or {})
                new = partition_of(str(meta.get("user_id", "")))
                if new is not None and new != meta.get("user_id"):
                    meta["user_id"] = new
                    ids.append(item.id)
                    metas.append(meta)
            if ids:
                await self._run(lambda c, i=ids, m=metas: c.update(ids=i, metadatas=m))
                rewritten += len(ids)
        return rewritten

    # -- reads ------------------------------------------------------------------------------

    async def get(
        self, row_id: str, *, with_vector: bool = False
    ) -> tuple[ArchivedMemory, list[float] | None] | None:
        """The row ``row_id`` (and its stored vector with ``with_vector``), or ``None``."""
        if not await self._exists_now():
            return None
        include: list[Any] = ["documents", "metadatas"]
        if with_vector:
            include.append("embeddings")
        res = await self._run(lambda c: c.get(ids=[row_id], include=include))
        if not res["ids"]:
            return None
        docs = res.get("documents") or [None]
        metas = res.get("metadatas") or [None]
        row = ArchivedMemory.from_chroma(res["ids"][0], docs[0], dict(metas[0] or {}))
        vector: list[float] | None = None
        embeddings = res.get("embeddings")
        if with_vector and embeddings is not None and len(embeddings):
            vector = [float(x) for x in embeddings[0]]
        return row, vector

    async def ids(self, row_ids: Sequence[str]) -> set[str]:
        """Which of ``row_ids`` are archived."""
        if not row_ids or not await self._exists_now():
            return set()
        wanted = list(row_ids)
        res = await self._run(lambda c: c.get(ids=wanted, include=[]))
        return set(res["ids"])

    async def row_ids(self, where: Mapping[str, Any]) -> list[str]:
        """Ids of the rows matching ``where`` (none, and nothing created, without an archive)."""
        if not await self._exists_now():
            return []
        clause = dict(where)
        res = await self._run(lambda c: c.get(where=clause, include=[]))
        return list(res["ids"])

    async def metadatas(self, where: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(row id, raw metadata)`` of the rows matching ``where`` (one read, no documents)."""
        if not await self._exists_now():
            return []
        clause = dict(where)
        res = await self._run(lambda c: c.get(where=clause, include=["metadatas"]))
        metas = res.get("metadatas") or [None] * len(res["ids"])
        return [(i, dict(m or {})) for i, m in zip(res["ids"], metas, strict=False)]

    async def iter_rows(self, where: Mapping[str, Any]) -> AsyncIterator[list[ArchivedMemory]]:
        """Every row matching ``where``, page by page by id (a user's export)."""
        if not await self._exists_now():
            return
        pages = self.guard.pages(self.name, self.invalidate, where=dict(where))
        async for items in pages:
            yield [ArchivedMemory.from_chroma(i.id, i.document, i.metadata) for i in items]

    async def versions(self, memory_ids: Sequence[str]) -> dict[str, int]:
        """Archived rows per memory (the swept memory itself and its previous versions);
        one metadata read for all of ``memory_ids``."""
        wanted = sorted(set(memory_ids))
        if not wanted or not await self._exists_now():
            return {}
        where: dict[str, Any] = {META_MEMORY_ID: {"$in": wanted}}
        res = await self._run(lambda c: c.get(where=where, include=["metadatas"]))
        counts: dict[str, int] = {}
        for row_id, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
            owner = str((meta or {}).get(META_MEMORY_ID) or row_id.split(VERSION_SEPARATOR, 1)[0])
            counts[owner] = counts.get(owner, 0) + 1
        return counts

    async def count(self, view: View) -> int:
        """Archived rows ``view`` shows: one partition, the origins it may see (the whole
        archive is :meth:`count_all`, for operators; there is no "``None`` means all")."""
        where = View.check(view).where()
        if not await self._exists_now():
            return 0
        res = await self._run(lambda c: c.get(where=where, include=[]))
        return len(res["ids"])

    async def count_all(self) -> int:
        """Archived rows of every partition: an operator door (console, ``ambot memory``,
        upkeep), never the chat path (``.ci/check_architecture.py``)."""
        if not await self._exists_now():
            return 0
        return await self._run(lambda c: c.count())

    async def list(
        self,
        view: View,
        *,
        limit: int = 20,
        offset: int = 0,
        memory_id: str | None = None,
    ) -> list[ArchivedMemory]:
        """Rows ``view`` shows (or the versions of ``memory_id`` among them), newest first."""
        where = View.check(view).where(**{META_MEMORY_ID: memory_id})
        return await self._page(where, limit=limit, offset=offset)

    async def list_all(
        self, *, limit: int = 20, offset: int = 0, memory_id: str | None = None
    ) -> list[ArchivedMemory]:
        """Rows of every partition (or every version of ``memory_id``), newest first: an
        operator door like :meth:`count_all`."""
        where = {META_MEMORY_ID: memory_id} if memory_id is not None else None
        return await self._page(where, limit=limit, offset=offset)

    async def _page(
        self, where: dict[str, Any] | None, *, limit: int, offset: int
    ) -> list[ArchivedMemory]:
        """One page of the rows matching ``where`` (``None``: all), newest first.

        Chroma cannot sort: the metadata of the matching rows is read once
        (no documents, no vectors) and only the page's documents are fetched.
        """
        if not await self._exists_now():
            return []
        res = await self._run(lambda c: c.get(where=where, include=["metadatas"]))
        metas = res.get("metadatas") or [None] * len(res["ids"])
        order = sorted(
            zip(res["ids"], metas, strict=False),
            key=lambda pair: (str((pair[1] or {}).get(META_ARCHIVED_AT, "")), pair[0]),
            reverse=True,
        )
        page = [row_id for row_id, _ in order[max(offset, 0) : max(offset, 0) + max(limit, 0)]]
        if not page:
            return []
        got = await self._run(lambda c: c.get(ids=page, include=["documents", "metadatas"]))
        docs = got.get("documents") or [None] * len(got["ids"])
        found = {
            i: ArchivedMemory.from_chroma(i, d, dict(m or {}))
            for i, d, m in zip(got["ids"], docs, got.get("metadatas") or [], strict=False)
        }
        return [found[i] for i in page if i in found]
