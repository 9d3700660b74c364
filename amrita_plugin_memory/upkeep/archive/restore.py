"""Restoring an archived memory into the live collection (``archive restore <id>``).

Two kinds of rows, two behaviours (what a user restoring something expects):

* **A swept or deleted memory** (row id == memory id) comes back as it was: same id,
  text, tags, importance, origin, ``created_at`` and stored vector (no
  embedding call). Its ``updated_at`` becomes the restore time, otherwise
  the next sweep would archive it again at once. The partition limit counts
  live memories only: restoring into a full partition is refused, nothing
  changes.
* **A previous version** (``<memory_id>~…``) brings that text back into the
  live memory ``memory_id`` (with its stored vector): the current text is
  kept in the archive first, like any update, so nothing is lost either way.
  When the memory itself is archived (swept or deleted), restore that first;
  when it is neither live nor archived (deleted before deletes were
  archived), the version becomes that memory again (same id, counts toward
  the limit).

The live row is written first and the archive row removed after it: a crash in
between leaves the memory in both places, and restoring again completes it.

A row of a forgotten user from before their forget (``storage.users.tombstones``) is
treated as absent: no restore brings a forgotten user back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...core.errors import ErrorKind, MemoryLimitReached, VectorStoreError
from ...core.records import MemoryRecord
from ...storage.archive.store import ArchivedMemory
from ...storage.keys import normalize_key
from ...storage.memory_store import MemoryStore, operator_view
from ...storage.users.tombstones import Tombstones

__all__ = ["ROW_ID_CHARS", "ArchiveRestoreError", "Restored", "parse_row_id", "restore"]

ROW_ID_CHARS = 80
"""Longest archive row id accepted: a memory id (at most 64) plus ``~`` and the digest."""


class ArchiveRestoreError(VectorStoreError):
    """The row cannot be restored (unknown id, another partition's, its memory archived)."""

    kind = ErrorKind.NOT_FOUND


def parse_row_id(value: object) -> str:
    """An archive row id as given by an operator or a chat user, checked before any lookup.

    ``ambot memory archive restore`` (with or without a running bot) and the
    console say the same thing for an empty, overlong or unprintable id.
    :func:`restore` does not check: to it an odd string is an id the archive
    does not hold ("归档中没有 …").
    """
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise ArchiveRestoreError("请提供归档 ID（ambot memory archive list 可查看）")
    if len(text) > ROW_ID_CHARS:
        raise ArchiveRestoreError(f"归档 ID 过长（{len(text)} 个字符，最多 {ROW_ID_CHARS} 个）")
    if not text.isprintable() or any(ch.isspace() for ch in text):
        raise ArchiveRestoreError("归档 ID 含有空白或不可见字符")
    return text


@dataclass(slots=True)
class Restored:
    """The outcome of one restore."""

    row: ArchivedMemory
    record: MemoryRecord
    """The live memory after the restore."""
    replaced_text: bool
    """A previous version replaced the live memory's text (the old text is in the archive)."""

    def describe(self) -> str:
        if self.replaced_text:
            return f"已把记忆 {self.record.id} 恢复为归档中的旧版本（替换前的内容已存入归档）"
        return f"已恢复记忆 {self.record.id}"


async def _reinstate(
    store: MemoryStore, record: MemoryRecord, vector: Sequence[float], limit: int | None
) -> None:
    """Write ``record`` back into the live collection with its id and vector (if absent)."""
    partition = record.partition
    view = operator_view(partition)
    async with store.writing(partition):
        if await store.get(view, record.id) is not None:
            return  # an interrupted restore already put it back
        if limit is not None:
            count = await store.count(view)
            if count >= limit:
                raise MemoryLimitReached(limit, count)
        record.updated_at = store.clock()
        try:
            await store.put_row(record, vector)
        except BaseException:
            store.drop_views(partition)
            raise
        store.counts.drop(partition)  # exact again on next use
        store.recent.added(partition, record.id)
        store.index.added(partition, vector, record)


async def restore(
    store: MemoryStore,
    row_id: str,
    *,
    partition: str | None = None,
    limit: int | None = None,
) -> Restored:
    """Restore the archive row ``row_id`` (see the module docstring).

    With ``partition`` (the chat command), a row of another partition behaves
    exactly like one that does not exist. ``limit`` is the partition limit.
    """
    got = await store.archive.get(row_id, with_vector=True)
    if got is None or (partition is not None and got[0].record.partition != partition):
        raise ArchiveRestoreError(f"归档中没有 id 为 {row_id} 的记忆")
    row, vector = got
    stones = await store.forgotten.load(normalize_key) if store.forgotten else Tombstones()
    meta = {**row.record.to_metadata(), "archived_at": row.archived_at}
    if stones.buries(meta):  # a forgotten user's row from before the forget: gone for good
        raise ArchiveRestoreError(f"归档中没有 id 为 {row_id} 的记忆")
    if vector is None:
        raise ArchiveRestoreError(f"归档记忆 {row_id} 没有存储的向量，无法恢复")
    owner = row.record.partition
    if row.is_version:
        live = await store.get(operator_view(owner), row.memory_id)
        if live is not None:
            # A version kept while pending holds a placeholder: embed its text again.
            stored = None if row.record.pending else vector
            updated = await store.update(
                owner, row.memory_id, content=row.record.content, stored_vector=stored
            )
            if updated is None:  # deleted meanwhile
                raise ArchiveRestoreError(f"记忆 {row.memory_id} 刚被删除，请重试")
            await store.archive.remove([row.id])
            return Restored(row, updated, replaced_text=True)
        if await store.archive.ids([row.memory_id]):
            raise ArchiveRestoreError(
                f"这是记忆 {row.memory_id} 的旧版本，而该记忆本身已归档：请先恢复 {row.memory_id}"
            )
    record = MemoryRecord(
        id=row.memory_id,
        content=row.record.content,
        partition=owner,
        scope=row.record.scope,
        tags=list(row.record.tags),
        importance=row.record.importance,
        created_at=row.record.created_at,
        updated_at=row.record.updated_at,
        origin=row.record.origin,
        author="" if stones.unmarks(meta) else row.record.author,
        pending=row.record.pending,  # a placeholder vector stays marked: embedded later
    )
    await _reinstate(store, record, vector, limit)
    await store.archive.remove([row.id])
    return Restored(row, record, replaced_text=False)
