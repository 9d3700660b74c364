"""Pending memories given their vectors in the background (issue #47).

A memory written while the embedding service failed is stored at once, *pending*
(``storage/pending``): found by keywords, left out of nearest-neighbour reads.
:class:`PendingEmbedder` gives each its vector when the service answers again, without a
restart: a background task of the running bot, in bounded batches (:data:`PENDING_BATCH`
texts per embedding call, one Chroma write per memory), with a pause between attempts that
the store's circuit breaker sets (5 s doubling to a minute: an outage costs one call a
minute, not one per memory).

Resumable by construction: the flag is in each row, so a restart (or a SIGKILL between
two memories) finds the memories still waiting and nothing else. Where processes share
the store, one of them embeds at a time (a lease), and ``MemoryStore.settle`` re-reads
each row in the partition's write section, so a memory is embedded once even when two
processes race (a forget meanwhile leaves nothing to settle).

The one case a batch cannot settle: vectors of another dimension than the collection's.
When the collection holds nothing but pending memories (the first memories of a new
store were written during an outage, or with ``EMBEDDING_ENABLED=false``), no vector
is lost by building it again: the re-embedding of ``ambot memory reindex``
(:func:`~.remap.remap`: backup first, resumable) runs once. Otherwise the model behind
the service's name changed: the task stops and says to run ``ambot memory reindex``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Literal

from nonebot.log import logger

from ..core.errors import PluginError, VectorStoreError
from ..storage.memory_store import MemoryRecord, MemoryStore
from .maintenance import Maintenance
from .remap import remap

__all__ = ["IDLE_POLL", "PENDING_BATCH", "PENDING_LEASE_TTL", "PassResult", "PendingEmbedder"]

PENDING_BATCH = 32
"""Texts per embedding call (and memories read per Chroma call)."""

IDLE_POLL = 60.0
"""Seconds between looks for pending memories when none were left (another process may
have written some); a write of this process that is kept pending wakes the task at once."""

PENDING_LEASE_TTL = 60.0
"""Seconds the lease of the process that embeds (shared stores) lasts unrenewed."""

MAX_BATCHES = 10_000
"""Batches of one pass at most (a bound; a pass ends long before on a real store)."""

State = Literal["idle", "waiting", "embedding", "stopped"]


@dataclass(slots=True)
class PassResult:
    """What one pass did."""

    embedded: int = 0
    merged: int = 0
    skipped: int = 0
    unavailable: bool = False
    """The service did not answer (or maintenance runs): the rest waits for the next pass."""
    busy: bool = False
    """Another process embeds this store's pending memories now."""
    stopped: str = ""
    """Why nothing can be settled until an operator acts (vectors of another dimension than
    the collection's); ``""``: nothing of the kind."""
    rebuilt: bool = False
    """The collection was re-embedded as a whole (it held only pending memories)."""


class PendingEmbedder:
    """Embeds the store's pending memories whenever the service answers.

    :meth:`run_once` is one pass (tests call it); :meth:`start` runs passes in a task until
    :meth:`stop`: after a pass that left memories waiting, once the breaker lets a call
    through; after a pass that left none, on :meth:`wake` or every :data:`IDLE_POLL` seconds.
    """

    def __init__(
        self, maint: Maintenance, *, batch: int = PENDING_BATCH, idle: float = IDLE_POLL
    ) -> None:
        self.maint = maint
        self.batch = max(1, batch)
        self.idle = idle
        self.lease_ttl = PENDING_LEASE_TTL
        self.state: State = "idle"
        self.stopped_reason = ""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def store(self) -> MemoryStore:
        return self.maint.store

    def wake(self) -> None:
        """A memory was kept pending: look now (the breaker still bounds the calls)."""

        self._wake.set()

    async def run_once(self) -> PassResult:
        """Embed pending memories until none are left, the service fails or a bound is hit."""
        result = PassResult()
        if not self.store.vectors.enabled:
            return result
        leases = self.store.coherence.leases
        if leases is None:
            await self._pass(result)
            return result
        async with leases.attempt(f"pending:{self.store.name}", ttl=self.lease_ttl) as held:
            if not held:
                result.busy = True
                return result
            await self._pass(result)
        return result

    async def _pass(self, result: PassResult) -> None:
        tried: set[str] = set()  # a memory skipped (changed meanwhile) is read again next pass
        for _ in range(MAX_BATCHES):
            try:
                records = [
                    r for r in await self.store.pending_batch(self.batch) if r.id not in tried
                ]
            except VectorStoreError as exc:  # maintenance runs, Chroma down
                logger.info(f"[Memory] 待补嵌入的记忆稍后再处理：{exc}")
                result.unavailable = True
                return
            if not records:
                return
            tried.update(r.id for r in records)
            vectors = await self.store.vectors.documents([r.content for r in records])
            if vectors is None:
                result.unavailable = True
                return
            if not await self._fits(len(vectors[0]), result):
                return
            for record, vector in zip(records, vectors, strict=True):
                if not await self._settle(record, vector, result):
                    return
            await asyncio.sleep(0)  # a batch at a time: chat turns go between them

    async def _settle(self, record: MemoryRecord, vector: list[float], result: PassResult) -> bool:
        try:
            done = await self.store.settle(record, vector)
        except VectorStoreError as exc:  # maintenance runs, Chroma down
            logger.info(f"[Memory] 待补嵌入的记忆稍后再处理：{exc}")
            result.unavailable = True
            return False
        if done == "embedded":
            result.embedded += 1
        elif done == "merged":
            result.merged += 1
        else:
            result.skipped += 1
        return True

    async def _fits(self, dimension: int, result: PassResult) -> bool:
        """Whether vectors of ``dimension`` can be stored; rebuilds a collection of pending
        memories only (see the module docstring)."""
        stored = await self.store.stored_dimension()
        if stored is None or stored == dimension:
            return True
        if await self.store.count_pending() >= await self.store.count_all():
            logger.info(
                f"[Memory] 向量库中只有待补嵌入的记忆（占位维度 {stored}），"
                f"按当前嵌入模型（维度 {dimension}）整体重建，先备份"
            )
            try:
                await remap(self.maint)
            except (PluginError, OSError) as exc:
                logger.warning(f"[Memory] 重建向量库未完成，稍后重试（没有记忆丢失）：{exc}")
                result.unavailable = True
                return False
            result.rebuilt = True
            return False
        result.stopped = (
            f"嵌入向量维度 {dimension} 与向量库的 {stored} 不一致：待补嵌入的记忆继续按关键词检索；"
            "更换了嵌入模型请运行 `ambot memory reindex`"
        )
        return False

    # -- the background task --------------------------------------------------------

    async def start(self) -> None:
        """Run passes in a task of the running loop (the bot's start-up); nothing to run
        with ``EMBEDDING_ENABLED=false``."""
        if not self.store.vectors.enabled:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the task (the bot's shutdown): a pass in flight ends between two memories
        at most one Chroma write later; what it did not reach stays pending."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        while True:
            self.state = "embedding"
            try:
                result = await self.run_once()
            except Exception as exc:  # never let the task die silently
                logger.warning(f"[Memory] 补嵌入出错，稍后重试：{exc.__class__.__name__}: {exc}")
                result = PassResult(unavailable=True)
            if result.embedded or result.merged:
                logger.info(
                    f"[Memory] 已为 {result.embedded + result.merged} 条待补嵌入的记忆补上向量"
                    + (f"（其中 {result.merged} 条并入已有记忆）" if result.merged else "")
                )
            if result.stopped:
                if result.stopped != self.stopped_reason:
                    logger.error(f"[Memory] 补嵌入已暂停：{result.stopped}")
                self.state = "stopped"
                self.stopped_reason = result.stopped
                await self._pause(result)  # looks again: a reindex may have fixed it
                continue
            self.stopped_reason = ""
            if result.rebuilt:
                continue
            self.state = "waiting" if result.unavailable or result.busy else "idle"
            await self._pause(result)

    async def _pause(self, result: PassResult) -> None:
        if result.unavailable:
            delay = max(self.store.vectors.breaker.retry_in(), 5.0)
        elif result.busy:
            delay = self.lease_ttl
        else:
            delay = self.idle
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()
        if result.unavailable:
            # A wake during an outage comes from a write that failed too: wait the breaker out.
            await asyncio.sleep(max(self.store.vectors.breaker.retry_in(), 0.0))
