"""The services of one process: the objects that own the plugin's state.

(Named ``services`` rather than ``runtime`` so that the module and the
plugin's ``runtime`` attribute never shadow each other.)
"""

from __future__ import annotations

import asyncio

from nonebot.log import logger

from .core.calendar import OwnerCalendar
from .core.config import PluginConfig
from .embedding.client import EmbeddingClient
from .embedding.fingerprint import pin_auto_model
from .embedding.forgotten import BackupScrubber
from .embedding.maintenance import Maintenance
from .embedding.pending import PendingEmbedder
from .infra.fences import UserEpochs
from .storage.chroma.connection import ChromaConnection
from .storage.consent_store import ConsentStore
from .storage.episodes.store import EpisodeStore
from .storage.groups.stores import GroupStores
from .storage.memo_store import MemoService
from .storage.memory_store import MEMORY_COLLECTION, MemoryStore, RetrievalSettings
from .storage.scope import ScopeRules
from .storage.shared.coherence import Coherence
from .storage.shared.sessions import orm_session
from .storage.usage import BackgroundBudget, UsageLedger
from .storage.users.fences import UserFences, VoidPoints
from .storage.users.loop_profile import profile_home
from .storage.users.loop_state_row import LoopStateAccess, LoopStateRow
from .storage.users.tombstones import ForgottenUsers
from .tools.memory_tools import MemoryTools
from .upkeep.users.user_data import UserData

__all__ = ["MemoryRuntime"]


class MemoryRuntime:
    """Owns the embedding client, the Chroma connection, the stores and the tool logic.

    Everything that talks to the outside world hangs off this one object, so
    there is exactly one HTTP session and one Chroma client per process, and
    one place (:meth:`close`) that releases them on shutdown.
    """

    def __init__(self, config: PluginConfig) -> None:
        self.config = config
        self.calendar = OwnerCalendar.named(config.file.memory.timezone)
        """The owner's days (``[memory] timezone``): every day boundary, period and shown date."""
        self.embedder = EmbeddingClient.from_env(config.env)
        self.connection = ChromaConnection(config.env, config.chroma_dir)
        self.store = MemoryStore(
            self.connection,
            self.embedder,
            MEMORY_COLLECTION,
            embeddings=config.env.embedding_enabled,  # false: keywords only, nothing embedded
        )
        self.store.index.max_bytes = config.file.vector_index_max_mb * 1024 * 1024
        self.store.keep_versions = config.file.archive.keep_history
        self.store.settings = RetrievalSettings.from_config(config.file)
        self.store.calendar = self.calendar
        shared = self.connection.mode == "remote"
        if shared:
            # Other processes (bots, ``ambot memory``) may write the same store: the change
            # feed and the leases in the SQL database keep every process's caches and
            # decisions coherent (``storage/shared``), and the tombstones of a forget are
            # rows there too. A local store belongs to this process.
            self.store.share(Coherence.remote(config.env, self.store.name))
        self.forgotten = ForgottenUsers.in_dir(
            config.data_dir,
            orm_session if shared else None,
            self.store.coherence.work,  # bounded, settled with the store's database work
        )
        self.store.forgotten = self.forgotten  # checked by every restore path
        self.fences = UserFences(
            UserEpochs(), self.forgotten, VoidPoints(orm_session, self.store.coherence.work)
        )
        """Background work for a user (extractions) is voided by their forget or opt-out:
        in this process, and through the shared tombstones and opt-outs in every other."""
        # EMBEDDING_MODEL_NAME=auto keeps the model of the stored fingerprint.
        pin_auto_model(self.embedder, self.store)
        self.usage = UsageLedger(self.calendar, work=self.store.coherence.work)
        """What the plugin's background requests and per-turn blocks cost (shared table)."""
        self.budget = BackgroundBudget(config.file.budget, self.usage)
        """``[budget]``: background requests wait for the next day once a cap is reached."""
        self.memo = MemoService(config.file.memo_max_chars)
        self.consent = ConsentStore(self.store.coherence.work)
        """Active memory's opt-outs (one cache per process, read by every turn)."""
        self.episodes = EpisodeStore(self.store.coherence.work)
        """Past conversations of every chat and the lines of those going on (issue #48)."""
        if shared:
            # The memo and opt-out caches follow the same feed: a row for a uni_id drops
            # what each keeps for it (a memo changed or forgotten through another bot).
            self.memo.share(self.store.coherence)
            self.consent.share(self.store.coherence)
        self.tools = MemoryTools(
            self.store,
            self.memo,
            calendar=self.calendar,
            memory_limit=config.file.per_session_memory_limit,
            config=config.file,
            episodes=self.episodes,
        )
        self.scopes = ScopeRules.from_config(config.file)
        """What every request's :class:`~.storage.scope.Scope` is decided with (the
        privacy switches, ``group_memo_editors``): the adapters build scopes from it."""
        self.maintenance = Maintenance(
            connection=self.connection,
            store=self.store,
            embedder=self.embedder,
            env=config.env,
            backup_dir=config.backup_dir,
            knowledge_collection=config.file.subconscious.knowledge_collection_name,
        )
        """What re-embedding, backups, status and the start-up check work on."""
        self.pending = PendingEmbedder(self.maintenance)
        """Memories kept without their vector (an outage) get it in the background."""
        self.store.vectors.on_pending.append(self.pending.wake)

    def user_data(
        self,
        groups: GroupStores,
        loop: LoopStateAccess | None = None,
        loop_target: str | None = None,
    ) -> UserData:
        """A user's export and forget over this runtime's stores and ``groups``.

        ``loop`` is the running L3 loop's state (changed through the loop, which
        keeps its view of the rows); without one the stored rows are edited, and the
        configured target user is the one messages wait for.
        The loop's profile is the file in the data dir (a row of the shared database
        in remote mode) and the opt-outs of active
        memory are read from their table; the plugin entry hands the running
        loop's and active memory's own objects over (``adapters.subconscious.bind_user_data``).
        """
        if loop is None:
            loop_target = self.config.file.subconscious.target_user_id.strip() or None
            loop = LoopStateRow(target=loop_target, work=self.store.coherence.work)
        data = UserData(
            self.store,
            self.memo,
            groups,
            calendar=self.calendar,
            forgotten=self.forgotten,
            loop=loop,
            loop_target=loop_target,
            # Whatever this process's [subconscious] says: a forget finds the profile by
            # the user's id (remote mode), the file by the configured target.
            profile=profile_home(
                self.config.data_dir,
                self.store.coherence,
                self.config.file.subconscious.target_user_id,
                self.forgotten.forgotten_at,
            ),
            consent=self.consent,
            backups=BackupScrubber(self.config.backup_dir, self.forgotten),
            usage=self.usage,
            episodes=self.episodes,
        )
        if isinstance(loop, LoopStateRow):  # the rows say whose the loop's items are
            data.loop_owners = loop.owners
        data.forget_hooks.append(self.fences.epochs.bump)  # work in flight writes nothing
        return data

    async def leave_loop(self) -> None:
        """Before a private event loop ends (an ``ambot memory`` command's): the store's
        database tasks started on it finish (ending the loop would cancel them while they
        hold a connection) and the embedder's HTTP session, bound to it, closes. The
        runtime keeps working on the next loop."""
        await self.store.coherence.settle()
        await self.embedder.close()

    async def close(self) -> None:
        """Release everything, for good (the bot's shutdown, the end of a command).

        The connection is closed in a worker thread (it waits for Chroma calls
        still running and stops a child server: seconds the event loop must
        not freeze for) and stays closed: a call arriving later fails instead
        of starting a new child server.
        """
        await self.pending.stop()  # what it did not reach stays pending, for the next start
        try:
            await self.usage.close()  # the chat turns' block counters since the last flush
        except Exception as exc:
            logger.warning(f"[Memory] 写入用量记录失败：{exc.__class__.__name__}: {exc}")
        await self.store.coherence.close()
        await self.embedder.close()
        await asyncio.to_thread(self.connection.close, final=True)
        logger.info("[Memory] 向量库连接已关闭")
