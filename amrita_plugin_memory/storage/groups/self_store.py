"""The bot's self memory (Openmim's L3): entries superusers add, injected into every turn.

Read in every chat turn, so the entries are cached after the first read;
writes go to the table and replace the cache. The total size of all entries is
bounded by ``[self_memory] max_chars``: an entry that would take it over is
refused with the sizes, and nothing is written.

In remote mode (:meth:`SelfMemoryStore.share`) every bot on the database shares
the table, so the list has one home there: a change commits a change-feed row
(``setting:self_memory:``) in its own transaction, and every other process drops
its cached list when it sees it (within a second; a failed poll drops it too).
A change is decided on the table as it is now, under a lease every process
takes (:meth:`~..shared.coherence.Coherence.exclusive`): ``max_chars`` holds for
the sum of what all processes added, and ``/memory self delete <编号>`` deletes
the entry listed at that position now, not in a stale copy.

Every read and write of the table is waited for at most the bound of the store's
:class:`~..shared.sessions.SharedWork` (local mode too); past it the caller gets a
:class:`~..shared.sessions.SharedDatabaseError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select

from ...infra.locks import PartitionLocks
from ..models import BotSelfMemory, db_now
from ..shared.coherence import SAFETY_EXPIRY, Coherence, setting_of, setting_row
from ..shared.sessions import SharedWork, orm_session

__all__ = ["SelfAddResult", "SelfEntry", "SelfMemoryStore"]

_LOCK = "self"
KIND = "self_memory"
"""The setting kind of the self memory's feed rows."""


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


async def _read() -> list[SelfEntry]:
    stmt = select(BotSelfMemory).order_by(BotSelfMemory.id)
    async with orm_session() as session:
        rows = (await session.scalars(stmt)).all()
    return [SelfEntry(r.id, r.content) for r in rows]


class SelfMemoryStore:
    """Self memory entries in the ``BotSelfMemory`` table, oldest first."""

    def __init__(self, max_chars: int, *, work: SharedWork | None = None) -> None:
        self.max_chars = max_chars
        self.work = work or SharedWork()
        """Bounds every operation's wait on the table (the runtime's one instance)."""
        self._cache: list[SelfEntry] | None = None
        self._loaded_at = 0.0
        self._generation = 0
        self._locks = PartitionLocks()
        self.coherence = Coherence(BotSelfMemory.__tablename__)
        """The process's change feed in remote mode (:meth:`share`); inactive otherwise."""

    def share(self, coherence: Coherence) -> None:
        """Follow other processes' changes (remote mode)."""
        self.coherence = coherence
        coherence.follow_with(self._changed_elsewhere, self._drop)

    def _changed_elsewhere(self, row: str) -> None:
        if setting_of(row, KIND) is not None:
            self._drop()

    def _drop(self) -> None:
        self._generation += 1
        self._cache = None

    def _cached(self) -> list[SelfEntry] | None:
        if self._cache is None:
            return None
        if self.coherence.active and time.monotonic() - self._loaded_at > SAFETY_EXPIRY:
            return None  # a backstop for a change whose feed row never came
        return self._cache

    async def list(self) -> list[SelfEntry]:
        await self.coherence.fresh()
        cached = self._cached()
        if cached is not None:
            return list(cached)
        generation = self._generation
        entries = await self.work.run(_read(), "读取自我记忆")
        if generation == self._generation:  # nothing changed meanwhile: keep it
            self._cache, self._loaded_at = entries, time.monotonic()
        return list(entries)

    async def _current(self) -> list[SelfEntry]:
        """The entries a change is decided on: the table now when shared, else the cache."""
        if self.coherence.active:
            self._drop()
        return await self.list()

    async def texts(self) -> list[str]:
        return [e.content for e in await self.list()]

    @staticmethod
    def size(entries: list[SelfEntry]) -> int:
        return sum(len(e.content) for e in entries)

    async def add(self, content: str) -> SelfAddResult:
        """Append an entry; refused (nothing written) when the total would exceed ``max_chars``."""
        async with (
            self._locks.hold(_LOCK),
            self.coherence.exclusive(KIND, "添加自我记忆"),
        ):
            entries = await self._current()
            current = self.size(entries)
            if current + len(content) > self.max_chars:
                return SelfAddResult(False, current, len(content), self.max_chars)
            entry = await self.work.run(self._insert(content), "添加自我记忆")
            self._changed_here([*entries, entry])
            return SelfAddResult(True, current + len(content), len(content), self.max_chars)

    async def _insert(self, content: str) -> SelfEntry:
        async with orm_session() as session:
            row = BotSelfMemory(content=content, created_at=db_now())
            session.add(row)
            await session.flush()  # assigns the id (read before commit expires the row)
            entry = SelfEntry(row.id, content)
            await self.coherence.note(session, [setting_row(KIND)])
            await session.commit()
        return entry

    def _changed_here(self, entries: list[SelfEntry] | None) -> None:
        self._generation += 1
        self._cache, self._loaded_at = entries, time.monotonic()

    async def delete(self, number: int) -> SelfEntry | None:
        """Delete the ``number``-th entry (1-based, as listed); ``None`` if there is none.

        For ``/memory self delete <编号>``, answered right after the list it
        refers to. A page that may have been open for a while (the console)
        deletes by id (:meth:`delete_id`): a position means another entry once
        someone else deleted one above it.
        """
        async with (
            self._locks.hold(_LOCK),
            self.coherence.exclusive(KIND, "删除自我记忆"),
        ):
            entries = await self._current()
            if not 1 <= number <= len(entries):
                return None
            return await self._remove(entries[number - 1])

    async def delete_id(self, entry_id: int) -> SelfEntry | None:
        """Delete the entry with ``entry_id``; ``None`` if there is none (nothing deleted)."""
        async with (
            self._locks.hold(_LOCK),
            self.coherence.exclusive(KIND, "删除自我记忆"),
        ):
            self._drop()  # by id: read the table as it is now
            entry = next((e for e in await self.list() if e.id == entry_id), None)
            return None if entry is None else await self._remove(entry)

    async def _remove(self, entry: SelfEntry) -> SelfEntry:
        await self.work.run(self._delete_row(entry.id), "删除自我记忆")
        self._changed_here(None)  # re-read: another process may have changed the table
        return entry

    async def _delete_row(self, entry_id: int) -> None:
        async with orm_session() as session:
            row = await session.get(BotSelfMemory, entry_id)
            if row is not None:
                await session.delete(row)
            await self.coherence.note(session, [setting_row(KIND)])
            await session.commit()
