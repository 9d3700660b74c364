"""L1 memo store: a short text per uni_id, replaced whole.

The memo of a private chat is the user's own row; the memo of a group chat is
the group's row. Writes are whole-text replacements with a hard character
limit (``memo_max_chars``): appending would make the limit meaningless, so an
over-long text is refused and the model is told the lengths to compress.

Injection into the prompt is :mod:`..adapters.memo_hook`. Reads go through an
in-process LRU cache (write-through, :class:`.shared.keyed.KeyedCache`); an empty
memo is cached too, so chats without a memo cost no query per turn. A read fills
the cache only if nothing was written or invalidated while it waited for the
database (a generation counter), so an older read can never replace a newer write.

In remote mode (:meth:`MemoService.share`) other processes write the same table:
every write and removal commits a change-feed row for its uni_id (the memo key
is the partition key of the same chat) in its own transaction, so a process
killed after the commit has told the others all the same, and every process's
cache drops that uni_id when it sees the row (all on
a whole-store row or a failed poll). A read first lets the feed catch up
(:meth:`.shared.coherence.Coherence.fresh`), so a memo changed or forgotten
through another bot is never injected more than about a second later.

Rows keyed in an older uni_id format (``user_{qq}`` / ``group_{gid}``) are
moved to the current format by :meth:`MemoService.migrate_keys`, at every
start and from ``ambot memory migrate-keys``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nonebot import logger
from sqlalchemy import Engine, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ..core.protocols import Fence
from ..infra.locks import PartitionLocks
from .keys import normalize_key
from .models import UserMemo, db_now
from .scope import View
from .shared.coherence import SAFETY_EXPIRY, Coherence
from .shared.keyed import KeyedCache
from .shared.sessions import orm_session

__all__ = ["MemoKeyMigration", "MemoService", "MemoWriteResult", "dispose_memo_engine"]

MEMO_CACHE_SIZE = 128


@dataclass(frozen=True, slots=True)
class MemoWriteResult:
    """Outcome of :meth:`MemoService.update`."""

    ok: bool
    current_chars: int
    attempted_chars: int
    limit: int


@dataclass(slots=True)
class MemoKeyMigration:
    """What :meth:`MemoService.migrate_keys` found or did."""

    scanned: int = 0
    """Rows in the memo table."""
    moved: int = 0
    """Legacy rows moved (or, in a dry run, to move) to the current key."""
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)
    """``(old key, new key, kept key)`` where both rows existed; the older was dropped."""
    unparsable: int = 0
    """Rows whose key is not a known uni_id form (left alone)."""


class MemoService:
    """Reads and writes memos in the ``UserMemo`` table."""

    def __init__(self, max_chars: int, cache_size: int = MEMO_CACHE_SIZE) -> None:
        self.max_chars = max_chars
        self._cache: KeyedCache[str] = KeyedCache(cache_size)
        self._locks = PartitionLocks()
        self.coherence = Coherence(UserMemo.__tablename__)
        """The process's change feed in remote mode (:meth:`share`); inactive otherwise."""

    def share(self, coherence: Coherence) -> None:
        """Keep the cache coherent with other processes' writes (remote mode)."""
        self.coherence = coherence
        coherence.follow(self._cache)
        self._cache.ttl = SAFETY_EXPIRY

    def cached(self, uni_id: str) -> bool:
        """Whether the memo of ``uni_id`` is in this process's cache (tests)."""
        return uni_id in self._cache

    async def get(self, view: View) -> str:
        """The memo ``view`` names (``""`` when there is none): a chat's own
        (:meth:`.scope.Scope.chat_view`), a partition's (:meth:`.scope.Scope.view`) or an
        operator's (:func:`.scope.operator_view`); never a bare key from the chat path."""
        return await self._read(View.check(view).partition)

    async def _read(self, uni_id: str) -> str:
        await self.coherence.fresh()
        cached = self._cache.get(uni_id)
        if cached is not None:
            return cached
        generation = self._cache.generation
        text = await self.coherence.run(_read_memo(uni_id), "读取备忘录")
        # A write (here or elsewhere) seen while this read was in flight may be
        # newer than ``text``: then the read is not cached.
        self._cache.put(uni_id, text, since=generation)
        return text

    async def _store(self, uni_id: str, content: str | None) -> bool:
        """Write (``None``: delete) the row of ``uni_id``, its feed row committed with it
        (:meth:`.shared.coherence.Coherence.note`); whether there was anything to change."""
        async with orm_session() as session:
            row = await session.get(UserMemo, uni_id)
            if content is None:
                if row is None:
                    return False
                await session.delete(row)
            elif row is None:
                session.add(UserMemo(user_id=uni_id, content=content, updated_at=db_now()))
            else:
                row.content = content
                row.updated_at = db_now()
            await self.coherence.note(session, [uni_id])
            await session.commit()
            return True

    async def update(
        self, uni_id: str, content: str, *, fence: Fence | None = None
    ) -> MemoWriteResult:
        """Replace the memo of ``uni_id``; refuse (write nothing) above the limit.

        Writes of one uni_id are serialised, so concurrent writers leave exactly
        one of their texts, never a mix. ``fence`` is awaited under the lock first
        (background work voided meanwhile raises and writes nothing).
        """
        async with self._locks.hold(uni_id):
            if fence is not None:
                await fence()
            current = await self._read(uni_id)
            attempted = len(content)
            if attempted > self.max_chars:
                return MemoWriteResult(False, len(current), attempted, self.max_chars)
            await self.coherence.run(self._store(uni_id, content), "写入备忘录")
            self._cache.written(uni_id, content)
            return MemoWriteResult(True, attempted, attempted, self.max_chars)

    async def remove(self, uni_id: str) -> bool:
        """Delete the row of ``uni_id`` (a user's forget); whether there was one.

        Unlike writing an empty memo (``/memory memo clear``), nothing of the row
        stays, not even when it was last changed.
        """
        async with self._locks.hold(uni_id):
            existed = await self.coherence.run(self._store(uni_id, None), "删除备忘录")
            self._cache.written(uni_id, "")
            return existed

    async def migrate_keys(self, *, dry_run: bool = False) -> MemoKeyMigration:
        """Move rows keyed in an older uni_id format to the current one.

        Idempotent: the second run finds nothing to move. When a row exists
        under both keys, the one with the newer ``updated_at`` is kept under the
        current key and the other is dropped (logged without any text). The
        table holds one short row per user or group, so the keys are scanned
        whole at every start.
        """
        report = MemoKeyMigration()
        async with orm_session() as session:
            keys = list((await session.scalars(select(UserMemo.user_id))).all())
        report.scanned = len(keys)
        moves: list[tuple[str, str]] = []
        for key in keys:
            new = normalize_key(key)
            if new is None:
                report.unparsable += 1
            elif new != key:
                moves.append((key, new))
        report.moved = len(moves)
        if dry_run:
            return report
        for old, new in moves:
            kept = await self._move(old, new)
            if kept is not None:
                report.conflicts.append((old, new, kept))
        return report

    async def _move(self, old: str, new: str) -> str | None:
        """Move row ``old`` to key ``new``; on a conflict the key whose text is kept."""
        async with self._locks.hold(new):
            kept: str | None = None
            async with orm_session() as session:
                legacy = await session.get(UserMemo, old)
                if legacy is None:  # moved meanwhile (another process)
                    return None
                current = await session.get(UserMemo, new)
                if current is None:
                    session.add(
                        UserMemo(user_id=new, content=legacy.content, updated_at=legacy.updated_at)
                    )
                else:
                    legacy_newer = legacy.updated_at > current.updated_at
                    kept = old if legacy_newer else new
                    logger.info(
                        f"[Memory] 备忘录键迁移：{old} 与 {new} 同时存在，保留较新的 {kept}"
                        f"（更新于 {max(legacy.updated_at, current.updated_at):%Y-%m-%d %H:%M:%S} UTC），"
                        f"丢弃另一条（{len(current.content if legacy_newer else legacy.content)} 字）"
                    )
                    if legacy_newer:
                        current.content = legacy.content
                        current.updated_at = legacy.updated_at
                await session.delete(legacy)
                await self.coherence.note(session, [old, new])
                await session.commit()
            self._cache.written(old, None)
            self._cache.written(new, None)
            return kept


async def _read_memo(uni_id: str) -> str:
    async with orm_session() as session:
        row = await session.get(UserMemo, uni_id)
        return row.content if row is not None else ""


async def dispose_memo_engine() -> None:
    """Close the pooled connections of the engine the memo table lives on.

    For one-shot processes (``ambot memory …``): nonebot_plugin_orm never
    disposes its engines, and aiosqlite's worker threads are not daemon
    threads, so a pooled connection left open would keep the process alive.
    """
    async with orm_session() as session:
        bind = session.sync_session.get_bind(UserMemo)
    if isinstance(bind, Engine):
        await AsyncEngine(bind).dispose()
