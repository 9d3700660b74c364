"""L1 memo store: a short text per uni_id, replaced whole.

The memo of a private chat is the user's own row; the memo of a group chat is
the group's row. Writes are whole-text replacements with a hard character
limit (``memo_max_chars``): appending would make the limit meaningless, so an
over-long text is refused and the model is told the lengths to compress.

Injection into the prompt is :mod:`..adapters.memo_hook`. Reads go through an in-process LRU cache (write-through invalidation); an
empty memo is cached too, so chats without a memo cost no query per turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from nonebot_plugin_amrita.cache import LRUCache
from nonebot_plugin_orm import get_session

from ..core.locks import PartitionLocks
from .models import UserMemo, db_now

__all__ = ["MemoService", "MemoWriteResult"]

MEMO_CACHE_SIZE = 128


@dataclass(frozen=True, slots=True)
class MemoWriteResult:
    """Outcome of :meth:`MemoService.update`."""

    ok: bool
    current_chars: int
    attempted_chars: int
    limit: int


class MemoService:
    """Reads and writes memos in the ``UserMemo`` table."""

    def __init__(self, max_chars: int, cache_size: int = MEMO_CACHE_SIZE) -> None:
        self.max_chars = max_chars
        self._cache: LRUCache[str, str] = LRUCache(cache_size)
        self._locks = PartitionLocks()

    async def get(self, uni_id: str) -> str:
        """The memo of ``uni_id`` (``""`` when there is none)."""
        if uni_id in self._cache:
            return self._cache.get(uni_id) or ""
        async with get_session() as session:
            row = await session.get(UserMemo, uni_id)
            text = row.content if row is not None else ""
        self._cache.put(uni_id, text)
        return text

    async def update(self, uni_id: str, content: str) -> MemoWriteResult:
        """Replace the memo of ``uni_id``; refuse (write nothing) above the limit.

        Writes of one uni_id are serialised, so concurrent writers leave exactly
        one of their texts, never a mix.
        """
        async with self._locks.hold(uni_id):
            current = await self.get(uni_id)
            attempted = len(content)
            if attempted > self.max_chars:
                return MemoWriteResult(False, len(current), attempted, self.max_chars)
            async with get_session() as session:
                row = await session.get(UserMemo, uni_id)
                if row is None:
                    session.add(UserMemo(user_id=uni_id, content=content, updated_at=db_now()))
                else:
                    row.content = content
                    row.updated_at = db_now()
                await session.commit()
            self._cache.put(uni_id, content)
            return MemoWriteResult(True, attempted, attempted, self.max_chars)
