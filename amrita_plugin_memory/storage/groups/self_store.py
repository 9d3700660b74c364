"""The bot's self memory (Openmim's L3): entries superusers add, injected into every turn.

Read in every chat turn, so the entries are cached after the first read;
writes go to SQLite and replace the cache. The total size of all entries is
bounded by ``[self_memory] max_chars``: an entry that would take it over is
refused with the sizes, and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from ...infra.locks import PartitionLocks
from ..models import BotSelfMemory, db_now
from ..shared.sessions import orm_session

__all__ = ["SelfAddResult", "SelfEntry", "SelfMemoryStore"]

_LOCK = "self"


@dataclass(frozen=True, slots=True)
class SelfEntry:
    id: int
    content: str


@dataclass(frozen=True, slots=True)
class SelfAddResult:
    ok: bool
    current_chars: int
    """Total size of the stored entries after the call."""
    attempted_chars: int
    limit: int


class SelfMemoryStore:
    """Self memory entries in the ``BotSelfMemory`` table, oldest first."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._cache: list[SelfEntry] | None = None
        self._locks = PartitionLocks()

    async def list(self) -> list[SelfEntry]:
        if self._cache is None:
            stmt = select(BotSelfMemory).order_by(BotSelfMemory.id)
            async with orm_session() as session:
                rows = (await session.scalars(stmt)).all()
            self._cache = [SelfEntry(r.id, r.content) for r in rows]
        return list(self._cache)

    async def texts(self) -> list[str]:
        return [e.content for e in await self.list()]

    @staticmethod
    def size(entries: list[SelfEntry]) -> int:
        return sum(len(e.content) for e in entries)

    async def add(self, content: str) -> SelfAddResult:
        """Append an entry; refused (nothing written) when the total would exceed ``max_chars``."""
        async with self._locks.hold(_LOCK):
            entries = await self.list()
            current = self.size(entries)
            if current + len(content) > self.max_chars:
                return SelfAddResult(False, current, len(content), self.max_chars)
            async with orm_session() as session:
                row = BotSelfMemory(content=content, created_at=db_now())
                session.add(row)
                await session.flush()  # assigns the id (read before commit expires the row)
                entry = SelfEntry(row.id, content)
                await session.commit()
            self._cache = [*entries, entry]
            return SelfAddResult(True, current + len(content), len(content), self.max_chars)

    async def delete(self, number: int) -> SelfEntry | None:
        """Delete the ``number``-th entry (1-based, as listed); ``None`` if there is none.

        For ``/memory self delete <编号>``, answered right after the list it
        refers to. A page that may have been open for a while (the console)
        deletes by id (:meth:`delete_id`): a position means another entry once
        someone else deleted one above it.
        """
        async with self._locks.hold(_LOCK):
            entries = await self.list()
            if not 1 <= number <= len(entries):
                return None
            return await self._remove(entries[number - 1])

    async def delete_id(self, entry_id: int) -> SelfEntry | None:
        """Delete the entry with ``entry_id``; ``None`` if there is none (nothing deleted)."""
        async with self._locks.hold(_LOCK):
            self._cache = None  # by id: read the table as it is now
            entry = next((e for e in await self.list() if e.id == entry_id), None)
            return None if entry is None else await self._remove(entry)

    async def _remove(self, entry: SelfEntry) -> SelfEntry:
        async with orm_session() as session:
            row = await session.get(BotSelfMemory, entry.id)
            if row is not None:
                await session.delete(row)
            await session.commit()
        self._cache = None  # re-read: another process may have changed the table
        return entry
