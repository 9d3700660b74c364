"""Taking memories out of the live collection: into the archive, or (forget only) for good.

Every delete of a memory (the chat tool ``delete_memory``, ``/memory … delete``,
the console, the L3 loop's ``subconscious_delete_memory``) goes through
``MemoryStore.delete`` → :func:`move_to_archive`: the row is saved into the
archive with its stored vector (reason ``deleted``, same id, restorable like
a swept memory) before it leaves the live collection; if that save fails,
nothing is deleted. Only a user's or operator's forget removes rows without
archiving them (``upkeep/users/erase``).

**Deleting only what was read.** Chroma has no transactions, but its
``delete`` takes ``ids`` and a ``where`` filter together and removes only the
ids that match the filter, evaluated by the server within that request. A
delete (and the sweep, ``upkeep/archive/sweep``) passes :func:`unchanged_where`: the
partition and the ``updated_at`` it read. A memory another process changed
in the meantime (every change sets a new ``updated_at``) no longer matches
and stays, so its change is not lost. Inside one process the partition's
lock already keeps writers out; the filter is for other processes (two bots
on one Chroma server), and what remains is the time between the server's
evaluation of the filter and its delete, inside one request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ...core.errors import VectorStoreError
from ...core.records import MemoryRecord
from ..chroma.remap_markers import CollectionGuard
from .store import REASON_DELETED, ArchiveStore

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection

__all__ = [
    "MOVE_ATTEMPTS",
    "RemovalStore",
    "deleted_count",
    "move_to_archive",
    "row_state",
    "unchanged_where",
]

MOVE_ATTEMPTS = 3
"""How often a delete reads the memory again when another process changed it meanwhile."""

T = TypeVar("T")


class RemovalStore(Protocol):
    """What removal needs of :class:`~..memory_store.MemoryStore` (which imports this module)."""

    name: str
    guard: CollectionGuard
    archive: ArchiveStore

    async def _run(self, fn: Callable[[Collection], T]) -> T: ...

    async def _write(self, fn: Callable[[Collection], T]) -> T: ...


def row_state(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``where`` clause of one row as read: its partition and its ``updated_at``."""
    meta = meta or {}
    clauses: list[dict[str, Any]] = [{"user_id": str(meta.get("user_id", ""))}]
    stamp = meta.get("updated_at")
    if isinstance(stamp, str | int | float) and not isinstance(stamp, bool):
        clauses.append({"updated_at": stamp})
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def unchanged_where(metas: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """A ``where`` matching rows only in a state they were read in (see the module docstring).

    With several rows (a sweep chunk) a row matches if it is in the state read
    of any of them: a changed row could still match only if its new
    ``updated_at`` (the time of the change) equalled, to the second, the old
    one of another row of its partition in the chunk, and those are older than
    a whole lifetime.
    """
    clauses: dict[str, dict[str, Any]] = {}
    for meta in metas:
        clause = row_state(meta)
        clauses.setdefault(json.dumps(clause, sort_keys=True, ensure_ascii=False), clause)
    unique = list(clauses.values())
    if not unique:
        raise ValueError("unchanged_where needs at least one row")
    return unique[0] if len(unique) == 1 else {"$or": unique}


def deleted_count(result: object) -> int | None:
    """Rows a Chroma ``delete`` removed (``None``: the server did not say)."""
    if isinstance(result, Mapping):
        count = result.get("deleted")
        if isinstance(count, int):
            return count
    return None


async def _read(
    store: RemovalStore, memory_id: str
) -> tuple[MemoryRecord, dict[str, Any], Any] | None:
    """``(record, raw metadata, stored vector)`` of ``memory_id``, or ``None``."""
    res = await store._run(
        lambda c: c.get(ids=[memory_id], include=["documents", "metadatas", "embeddings"])
    )
    if not res["ids"]:
        return None
    meta = dict((res.get("metadatas") or [None])[0] or {})
    docs = res.get("documents") or [None]
    vectors = res.get("embeddings")
    vector = vectors[0] if vectors is not None and len(vectors) else None
    return MemoryRecord.from_chroma(memory_id, docs[0], meta), meta, vector


async def move_to_archive(
    store: RemovalStore, partition: str, memory_id: str, *, reason: str = REASON_DELETED
) -> bool:
    """Archive, then delete, the memory ``memory_id`` of ``partition``; ``False`` if it is not there.

    Called under the partition's lock. The row and its stored vector are
    saved first (``reason``, by default ``deleted``); the live row is then deleted only in
    the state that was saved. When another process changed it in between,
    its new state is read, saved and deleted the same way (at most
    :data:`MOVE_ATTEMPTS` times, then a clear error and nothing deleted). A
    memory gone meanwhile (another process deleted or swept it) counts as
    deleted: it is in the archive.
    """
    for attempt in range(MOVE_ATTEMPTS):
        got = await _read(store, memory_id)
        if got is None or got[1].get("user_id") != partition:
            return attempt > 0
        record, meta, vector = got
        if vector is None:
            raise VectorStoreError("读取原记忆的向量失败，未删除记忆")
        # Refused while a remap marks the live collection: nothing is archived
        # into a collection the remap would not cover, nothing deleted.
        await store.guard.for_write(store.name)
        vector = [float(x) for x in vector]
        await store.archive.save([(memory_id, record, vector)], reason=reason)
        where = unchanged_where([meta])
        result = await store._write(lambda c, w=where: c.delete(ids=[memory_id], where=w))
        if deleted_count(result) == 1:
            return True
        # Changed by another process after the read (or the server did not
        # say): read again; a memory gone now is archived and deleted.
    raise VectorStoreError(f"记忆 {memory_id} 正被另一个进程频繁修改，未删除，请稍后重试")
