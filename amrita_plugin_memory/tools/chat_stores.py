"""The one door of the ``/memory`` commands to the stores they change (issue #49 item 3).

A command reaches these stores only through the :class:`ChatStores` of its turn,
made from the turn's :class:`~..storage.scope.Scope` by :meth:`ChatStoreSource.of`
(as :class:`~.memory_tools.MemoryTools` is for the chat tools). No method takes a
partition key, a user id or a view: what it reads or changes is the scope's own,
the memo and the episodes of ``kind``'s partition and the speaker's own archive
(and their waiting episode lines, dropped on an opt-out). The architecture
check keeps ``tools/*commands*.py`` off ``.archive``, ``.memo`` and ``MemoService``.
"""

from __future__ import annotations

import time

from ..core.episodes import EpisodeRecord
from ..storage.archive.store import REASON_DELETED, ArchivedMemory
from ..storage.episodes.store import EpisodeStore
from ..storage.memo_store import MemoService
from ..storage.memory_store import MemoryStore
from ..storage.scope import Scope
from ..upkeep.archive.restore import Restored, restore
from .memory_tools import MemoryTools

__all__ = ["ChatStoreSource", "ChatStores"]


class ChatStoreSource:
    """The process's memo, archive and episodes as the chat commands reach them (built once)."""

    def __init__(
        self,
        store: MemoryStore,
        memo: MemoService,
        *,
        memory_limit: int,
        episodes: EpisodeStore | None = None,
    ) -> None:
        self._store = store
        self._memo = memo
        self._memory_limit = memory_limit
        self._episodes = episodes

    @classmethod
    def of_tools(cls, tools: MemoryTools, episodes: EpisodeStore | None = None) -> ChatStoreSource:
        """The stores behind the chat tools ``tools`` (the same memo, archive and limit)."""
        return cls(tools.store, tools.memo, memory_limit=tools.memory_limit, episodes=episodes)

    def of(self, scope: Scope) -> ChatStores:
        """What the turn of ``scope`` may reach."""
        return ChatStores(scope, self._store, self._memo, self._memory_limit, self._episodes)


class ChatStores:
    """One turn's memo and archive: the scope's own, nothing else (:meth:`ChatStoreSource.of`)."""

    def __init__(
        self,
        scope: Scope,
        store: MemoryStore,
        memo: MemoService,
        memory_limit: int,
        episodes: EpisodeStore | None = None,
    ) -> None:
        self.scope = scope
        self._store = store
        self._memo = memo
        self._memory_limit = memory_limit
        self._episodes = episodes

    # -- the memo of the scope's own partition ----------------------------------------------

    async def memo_text(self, kind: str) -> str:
        """The memo of ``kind``'s partition (``user``: the speaker's, ``group``: this group's)."""
        return await self._memo.get(self.scope.view(kind))

    async def clear_memo(self, kind: str) -> bool:
        """Empty the memo of ``kind``'s partition; whether it was written (the caller checked
        the right to)."""
        result = await self._memo.update(self.scope.partition(kind), "")
        return result.ok

    # -- the speaker's own archive ------------------------------------------------------------

    async def archive_count(self) -> int:
        """Archived rows of the speaker's own partition the turn may see."""
        return await self._store.archive.count(self.scope.view("user"))

    async def archive_page(self, *, limit: int, offset: int) -> list[ArchivedMemory]:
        """A page of the speaker's own archived rows, newest first."""
        return await self._store.archive.list(self.scope.view("user"), limit=limit, offset=offset)

    async def restore(self, row_id: str) -> Restored:
        """Restore the speaker's archived row ``row_id`` (a row of another partition is not
        found); :class:`~..core.errors.ScopeRefused` when the turn may not write there."""
        partition = await self.scope.require("write", "user")
        return await restore(self._store, row_id, partition=partition, limit=self._memory_limit)

    # -- the episodes of the scope's own partition --------------------------------------------

    def _episode_store(self) -> EpisodeStore:
        if self._episodes is None:
            raise RuntimeError("ChatStoreSource was built without the episode store")
        return self._episodes

    async def recent_episodes(self, kind: str, count: int) -> list[EpisodeRecord]:
        """The last ``count`` episodes of ``kind``'s partition the turn may see."""
        return list(await self._episode_store().recent(self.scope.view(kind), count))

    async def count_episodes(self, kind: str) -> int:
        """Episodes of ``kind``'s partition the turn may see."""
        return await self._episode_store().count(self.scope.view(kind))

    async def delete_episode(self, kind: str, episode_id: str) -> bool:
        """Move one episode of ``kind``'s partition the turn may see to the archive (an id of
        another chat: ``False``); the caller checked the right to."""
        view = self.scope.view(kind)
        return await self._episode_store().archive(
            view, episode_id, at=time.time(), reason=REASON_DELETED
        )

    async def drop_own_episode_lines(self) -> int:
        """Drop the speaker's waiting lines in every chat and their private chat's (an
        opt-out of active memory: nothing of theirs becomes an episode)."""
        me = self.scope.user_view()
        return await self._episode_store().drop_user_lines(me.user_id, self.scope.partition("user"))
